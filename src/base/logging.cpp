#include "src/base/logging.h"

#include <cstdio>
#include <string>

#include "src/base/errors.h"

namespace ff {
namespace {

struct ArtifactInfo {
  std::string_view name;
  LogComponent component;
  bool default_on;
};

constexpr std::string_view kComponentNames[] = {
#define FF_LOG_COMPONENT(name, doc) #name,
#define FF_LOG_ARTIFACT(name, component, default_on, doc)
#include "src/base/log_registry.def"
#undef FF_LOG_COMPONENT
#undef FF_LOG_ARTIFACT
};

constexpr ArtifactInfo kArtifacts[] = {
#define FF_LOG_COMPONENT(name, doc)
#define FF_LOG_ARTIFACT(name, component, default_on, doc) {#name, LogComponent::component, default_on},
#include "src/base/log_registry.def"
#undef FF_LOG_COMPONENT
#undef FF_LOG_ARTIFACT
};

constexpr int kNumComponents = static_cast<int>(LogComponent::kCount);
constexpr int kNumArtifacts = static_cast<int>(LogArtifact::kCount);

LogSettings all_off() {
  LogSettings s{};
  for (auto& l : s.component_level) l = LogLevel::Off;
  for (auto& a : s.artifact_on) a = false;
  return s;
}

LogSink g_sink = nullptr;
thread_local CompileTag t_tag;

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

}  // namespace

LogSettings g_log_settings = all_off();

std::vector<std::string> log_component_names() { return {std::begin(kComponentNames), std::end(kComponentNames)}; }
std::vector<std::string> log_artifact_names() {
  std::vector<std::string> out;
  for (const auto& a : kArtifacts) out.emplace_back(a.name);
  return out;
}
std::string_view log_component_name(LogComponent c) { return kComponentNames[static_cast<int>(c)]; }
std::string_view log_artifact_name(LogArtifact a) { return kArtifacts[static_cast<int>(a)].name; }
LogComponent log_artifact_component(LogArtifact a) { return kArtifacts[static_cast<int>(a)].component; }

void set_log_spec(std::string_view spec) {
  LogSettings s = all_off();
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string_view item = spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    LogLevel level = LogLevel::Info;
    if (item.front() == '+' || item.front() == '-') {
      level = item.front() == '+' ? LogLevel::Debug : LogLevel::Error;
      item.remove_prefix(1);
    }
    bool found = false;
    if (item == "all") {
      for (auto& l : s.component_level) l = level;
      for (int a = 0; a < kNumArtifacts; ++a) s.artifact_on[a] = s.artifact_on[a] || kArtifacts[a].default_on;
      found = true;
    }
    // torch's TORCH_LOGS name of a component, accepted as an alias.
    if (item == "dynamo") item = log_component_name(LogComponent::frontend);
    for (int c = 0; c < kNumComponents && !found; ++c) {
      if (kComponentNames[c] != item) continue;
      s.component_level[c] = level;
      // Enabling a component enables its artifacts, except those off by default.
      for (int a = 0; a < kNumArtifacts; ++a)
        if (static_cast<int>(kArtifacts[a].component) == c && kArtifacts[a].default_on) s.artifact_on[a] = true;
      found = true;
    }
    for (int a = 0; a < kNumArtifacts && !found; ++a) {
      if (kArtifacts[a].name != item) continue;
      s.artifact_on[a] = true;  // artifacts are on/off: +/- is accepted and ignored, as in TORCH_LOGS
      found = true;
    }
    if (!found)
      throw UserError("FRAMEFUSE_LOGS: unknown component or artifact '" + std::string(item) +
                      "'. Valid components: " + join(log_component_names()) + ", all (dynamo: frontend). Valid artifacts: " +
                      join(log_artifact_names()) + ".");
  }
  g_log_settings = s;
}

void set_log_sink(LogSink sink) { g_sink = sink; }

CompileTag current_compile_tag() { return t_tag; }
void set_compile_tag(CompileTag tag) { t_tag = tag; }

static std::string tagged(std::string_view msg) {
  if (t_tag.frame_id < 0) return std::string(msg);
  return "[" + std::to_string(t_tag.frame_id) + "/" + std::to_string(t_tag.compile_id) + "] " + std::string(msg);
}

void log_emit(LogComponent c, LogLevel level, std::string_view msg) {
  std::string logger = "framefuse." + std::string(log_component_name(c));
  std::string text = tagged(msg);
  if (g_sink) g_sink(logger, static_cast<int>(level), text);
  else std::fprintf(stderr, "%s: %s\n", logger.c_str(), text.c_str());
}

void log_emit(LogArtifact a, std::string_view msg) {
  std::string logger = "framefuse." + std::string(log_component_name(log_artifact_component(a))) + "." +
                       std::string(log_artifact_name(a));
  std::string text = tagged(msg);
  if (g_sink) g_sink(logger, static_cast<int>(LogLevel::Info), text);
  else std::fprintf(stderr, "%s: %s\n", logger.c_str(), text.c_str());
}

}  // namespace ff
