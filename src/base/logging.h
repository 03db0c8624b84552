// FRAMEFUSE_LOGS: TORCH_LOGS-style logging shared by every area.
//
//   FRAMEFUSE_LOGS="+frontend,graph_breaks,output_code"
//
// Components have a level (`+name` DEBUG, `name` INFO, `-name` ERROR); artifacts are on/off.
// Every component and artifact is listed once in src/base/log_registry.def. Records are tagged with the
// current `[frame_id/compile_id]` and go to Python's `logging` under `framefuse.<component>`.
//
// The hot path never logs: callers test `log_enabled(...)` (a load and a compare) first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ff {

// X(name, owning component, on when the component is enabled, description)
enum class LogComponent : uint8_t {
#define FF_LOG_COMPONENT(name, doc) name,
#define FF_LOG_ARTIFACT(name, component, default_on, doc)
#include "src/base/log_registry.def"
#undef FF_LOG_COMPONENT
#undef FF_LOG_ARTIFACT
  kCount
};

enum class LogArtifact : uint8_t {
#define FF_LOG_COMPONENT(name, doc)
#define FF_LOG_ARTIFACT(name, component, default_on, doc) name,
#include "src/base/log_registry.def"
#undef FF_LOG_COMPONENT
#undef FF_LOG_ARTIFACT
  kCount
};

enum class LogLevel : uint8_t { Debug = 10,
                                Info = 20,
                                Warning = 30,
                                Error = 40,
                                Off = 255 };

struct LogSettings {
  LogLevel component_level[static_cast<int>(LogComponent::kCount)];
  bool artifact_on[static_cast<int>(LogArtifact::kCount)];
};

// The settings in force (read on every check; written only by set_log_spec).
extern LogSettings g_log_settings;

inline bool log_enabled(LogArtifact a) { return g_log_settings.artifact_on[static_cast<int>(a)]; }
inline bool log_enabled(LogComponent c, LogLevel level) {
  return static_cast<int>(level) >= static_cast<int>(g_log_settings.component_level[static_cast<int>(c)]);
}

// Parses a TORCH_LOGS-style spec and applies it. Throws UserError on an unknown name, listing the
// valid ones. An empty spec turns everything off.
void set_log_spec(std::string_view spec);

std::vector<std::string> log_component_names();
std::vector<std::string> log_artifact_names();
std::string_view log_component_name(LogComponent c);
std::string_view log_artifact_name(LogArtifact a);
LogComponent log_artifact_component(LogArtifact a);

// Emits a record. The sink is installed by the Python layer (framefuse._logging); without one,
// records go to stderr.
void log_emit(LogComponent c, LogLevel level, std::string_view msg);
void log_emit(LogArtifact a, std::string_view msg);

using LogSink = void (*)(std::string_view logger, int level, std::string_view msg);
void set_log_sink(LogSink sink);

// The `[frame_id/compile_id]` tag of the compile in progress (-1: none).
struct CompileTag {
  int frame_id = -1;
  int compile_id = -1;
};
CompileTag current_compile_tag();
void set_compile_tag(CompileTag tag);

}  // namespace ff
