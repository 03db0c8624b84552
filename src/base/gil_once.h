// Process-lifetime values built on first use, under the GIL.
//
// Not function-local statics: their builders run Python code (imports, attribute lookups that may
// reach a module's __getattr__), and the interpreter may hand the GIL to another thread in the
// middle. That thread would then wait on C++'s initialization guard while holding the GIL, and
// neither thread could go on. Here the second thread builds its own value instead; the first one
// stored wins and the other is leaked, as every such value is (they outlive interpreter teardown).
#pragma once

namespace ff {

// `slot`: a static pointer, initially null (constant-initialized: no guard). `build()` returns a new,
// never freed T* or throws (then nothing is stored, and the next call tries again). Needs the GIL.
template <typename T, typename Build>
T* gil_once(T*& slot, Build&& build) {
  if (T* done = slot) return done;
  T* made = build();
  if (!slot) slot = made;  // NB: the GIL is held again here: no other thread runs between test and store
  return slot;
}

}  // namespace ff
