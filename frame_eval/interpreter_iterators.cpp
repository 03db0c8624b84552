// Iteration on symbolic values: the iterators CPython's builtins make, modelled lazily (symbolic.h,
// FF_ITER_KINDS). A list iterator reads the list when next() is called, so appending while looping
// behaves as in eager; enumerate/zip/map/filter pull from their inner iterators one item at a time,
// so a consumer that stops early (next(), any(), a break) consumes what eager would. Where eager
// raises (a dict changed size while iterated, zip(strict=True) of unequal lengths) the trace breaks
// and the frame runs eagerly, raising eager's error.
#include <Python.h>

#include <algorithm>

#include "frame_eval/interpreter_impl.h"
#include "frame_eval/py_util.h"

namespace ff {

Sym SymbolicTracer::itertools_call(PyObject* callee, std::vector<Sym>& args, KwArgs& kwargs) {
  if (callee == known().itertools_chain) {
    if (!kwargs.empty()) brk(BreakKind::RaisesInTrace, "TypeError: chain() takes no keyword arguments");
    return make_iterator(IterKind::Chain, args);
  }
  if (PyCFunction_Check(callee) && PyCFunction_GET_SELF(callee) == known().itertools_chain &&
      std::string_view(reinterpret_cast<PyCFunctionObject*>(callee)->m_ml->ml_name) == "from_iterable") {
    // chain.from_iterable(outer): iter(outer) now, each iterable taken from it when reached.
    if (args.size() != 1 || !kwargs.empty()) brk(BreakKind::RaisesInTrace, "TypeError: chain.from_iterable() arguments");
    Sym it = make_iterator(IterKind::Chain, {get_iter(args[0])});
    it->flag = true;
    return it;
  }
  if (callee == known().itertools_islice) return islice_call(args, kwargs);
  if (callee != known().itertools_repeat) return nullptr;
  // itertools.repeat(object[, times]): the one value, `times` times (a negative count: none) or forever.
  Sym value = !args.empty() ? args[0] : nullptr;
  Sym times = args.size() > 1 ? args[1] : nullptr;
  for (auto& [key, v] : kwargs) {
    if (key == "object" && !value) value = v;
    else if (key == "times" && !times) times = v;
    else brk(BreakKind::RaisesInTrace, "TypeError: repeat() got an unexpected keyword argument '" + key + "'");
  }
  if (!value || args.size() > 2) brk(BreakKind::RaisesInTrace, "TypeError: repeat() arguments");
  Sym it = make_iterator(IterKind::Repeat, {value});
  it->stop = -1;
  if (times) {
    if (!times->is(SymKind::Const) || !PyLong_CheckExact(times->obj.get())) brk(BreakKind::UnsupportedOperand, "itertools.repeat with a count that is not a constant int");
    it->stop = std::max<long long>(0, PyLong_AsLongLong(times->obj.get()));
    if (PyErr_Occurred()) {
      PyErr_Clear();
      brk(BreakKind::UnsupportedOperand, "itertools.repeat with a huge count");
    }
  }
  return it;
}

// itertools.islice(iterable, stop) / (iterable, start, stop[, step]): iter(iterable) now; its bounds
// constant ints or None, checked as CPython checks them (eager raises the ValueError).
Sym SymbolicTracer::islice_call(std::vector<Sym>& args, KwArgs& kwargs) {
  if (!kwargs.empty()) brk(BreakKind::RaisesInTrace, "TypeError: islice() takes no keyword arguments");
  if (args.size() < 2 || args.size() > 4) brk(BreakKind::RaisesInTrace, "TypeError: islice() arguments");
  // -1: None; -2: out of range (eager raises)
  auto bound = [&](const Sym& v) -> long long {
    if (!v->is(SymKind::Const)) brk(BreakKind::UnsupportedOperand, "itertools.islice with a bound that is not a constant");
    if (v->obj.get() == Py_None) return -1;
    if (!PyLong_Check(v->obj.get())) return -2;
    long long n = PyLong_AsLongLong(v->obj.get());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return -2;
    }
    return n < 0 ? -2 : n;
  };
  long long start = args.size() > 2 ? bound(args[1]) : 0;
  long long stop = bound(args[args.size() > 2 ? 2 : 1]);
  long long step = args.size() > 3 ? bound(args[3]) : 1;
  if (start == -1) start = 0;
  if (step == -1) step = 1;
  if (start < 0 || stop == -2 || step <= 0) brk(BreakKind::RaisesInTrace, "ValueError: islice() arguments out of range");
  Sym it = make_iterator(IterKind::Islice, {get_iter(args[0])});
  it->start = start;
  it->stop = stop;
  it->step = step;
  return it;
}

Sym SymbolicTracer::make_iterator(IterKind kind, std::vector<Sym> items, Sym origin) {
  Sym it = make_sym(SymKind::Iterator);
  it->iter = kind;
  it->items = std::move(items);
  it->origin = std::move(origin);
  return it;
}

// iter(obj) for an object whose class says how: collections.abc.Sequence's __iter__ and the old
// protocol (only __getitem__) as a lazy Protocol iterator, an __iter__ written in Python inlined.
Sym SymbolicTracer::object_iter(const Sym& v) {
  if (!v->is(SymKind::Object) && !v->is(SymKind::NewObject)) return nullptr;
  if (v->is(SymKind::Object) && module_container_items(v)) return nullptr;
  auto* t = reinterpret_cast<PyTypeObject*>(type_of(v));
  PyObject* it = type_lookup(t, "__iter__");
  if (it && it == known().sequence_iter) return make_iterator(IterKind::Protocol, {}, v);
  if (it && PyFunction_Check(it)) {
    Sym r = call(make_const(it), {v}, {});
    if (!r->is(SymKind::Iterator)) brk(BreakKind::UnsupportedIteration, "__iter__ returned " + describe_sym(r));
    return r;
  }
  PyObject* gi = type_lookup(t, "__getitem__");
  if (!it && gi && PyFunction_Check(gi)) {
    Sym r = make_iterator(IterKind::Protocol, {}, v);
    r->flag = true;
    return r;
  }
  return nullptr;
}

Sym SymbolicTracer::get_iter(const Sym& v) {
  if (Sym d = mapping_part(v, "__iter__")) return get_iter(d);
  materialize(v);
  if (Sym it = object_iter(v)) return it;
  switch (v->kind) {
    case SymKind::Iterator:
      return v;
    case SymKind::List:
    case SymKind::Tuple:
      return make_iterator(IterKind::Seq, {}, v);
    case SymKind::Dict:
      return get_iter(dict_view(v, "keys"));
    case SymKind::DictView: {
      const Sym& d = v->items[0];
      IterKind k = v->name == "keys" ? IterKind::DictKeys : v->name == "values" ? IterKind::DictValues
                                                                                : IterKind::DictItems;
      Sym it = make_iterator(k, {}, d);
      it->stop = d->version;
      return it;
    }
    case SymKind::Set: {
      // NB: a set's iterator checks the size at each step ("Set changed size during iteration").
      Sym it = make_iterator(IterKind::Items, set_elements(v), v);
      it->stop = PySet_GET_SIZE(v->obj.get());
      return it;
    }
    case SymKind::Const:
      if (PyRange_Check(v->obj.get())) {
        PyObject* r = v->obj.get();
        PyRef start = PyRef::steal(PyObject_GetAttrString(r, "start"));
        PyRef stop = PyRef::steal(PyObject_GetAttrString(r, "stop"));
        PyRef step = PyRef::steal(PyObject_GetAttrString(r, "step"));
        Sym it = make_iterator(IterKind::Range, {});
        it->start = it->pos = PyLong_AsLongLong(start.get());
        it->stop = PyLong_AsLongLong(stop.get());
        it->step = PyLong_AsLongLong(step.get());
        if (PyErr_Occurred()) {
          PyErr_Clear();
          brk(BreakKind::UnsupportedIteration, "range with huge bounds");
        }
        return it;
      }
      [[fallthrough]];
    default:
      return make_iterator(IterKind::Items, iterate(v));
  }
}

Sym SymbolicTracer::iter_next(const Sym& it) {
  if (!it->is(SymKind::Iterator)) brk(BreakKind::UnsupportedIteration, "next() of " + describe_sym(it));
  if (it->exhausted) return nullptr;
  Sym r;
  switch (it->iter) {
    case IterKind::Range: {
      bool more = it->step > 0 ? it->pos < it->stop : it->pos > it->stop;
      if (more) {
        r = make_const_steal(PyLong_FromLongLong(it->pos));
        it->pos += it->step;
      }
      break;
    }
    case IterKind::Seq: {
      const std::vector<Sym>& items = it->origin->items;
      if (static_cast<size_t>(it->pos) < items.size()) r = items[static_cast<size_t>(it->pos++)];
      break;
    }
    case IterKind::Reversed: {
      const std::vector<Sym>& items = it->origin->items;
      if (it->pos >= 0 && static_cast<size_t>(it->pos) < items.size()) r = items[static_cast<size_t>(it->pos--)];
      break;
    }
    case IterKind::Items:
      if (it->origin && it->origin->is(SymKind::Set) && PySet_GET_SIZE(it->origin->obj.get()) != it->stop)
        brk(BreakKind::RaisesInTrace, "RuntimeError: Set changed size during iteration");
      if (static_cast<size_t>(it->pos) < it->items.size()) r = it->items[static_cast<size_t>(it->pos++)];
      break;
    case IterKind::DictKeys:
    case IterKind::DictValues:
    case IterKind::DictItems: {
      const Sym& d = it->origin;
      if (d->version != static_cast<uint32_t>(it->stop))
        brk(BreakKind::RaisesInTrace, "RuntimeError: dictionary changed size during iteration");
      if (static_cast<size_t>(it->pos) < d->keys.size()) {
        size_t i = static_cast<size_t>(it->pos++);
        if (it->iter == IterKind::DictKeys) r = d->keys[i];
        else if (it->iter == IterKind::DictValues) r = d->items[i];
        else r = make_tuple({d->keys[i], d->items[i]});
      }
      break;
    }
    case IterKind::Enumerate:
      if (Sym v = iter_next(it->items[0])) r = make_tuple({make_const_steal(PyLong_FromLongLong(it->pos++)), v});
      break;
    case IterKind::Zip: {
      std::vector<Sym> row;
      for (size_t i = 0; i < it->items.size(); ++i) {
        Sym v = iter_next(it->items[i]);
        if (v) {
          row.push_back(std::move(v));
          continue;
        }
        if (it->flag) {  // strict: every argument must end here
          if (i > 0) brk(BreakKind::RaisesInTrace, "ValueError: zip() argument " + std::to_string(i + 1) + " is shorter than argument 1");
          for (size_t j = 1; j < it->items.size(); ++j)
            if (iter_next(it->items[j]))
              brk(BreakKind::RaisesInTrace, "ValueError: zip() argument " + std::to_string(j + 1) + " is longer than argument 1");
        }
        row.clear();
        break;
      }
      if (!it->items.empty() && row.size() == it->items.size()) r = make_tuple(std::move(row));
      break;
    }
    case IterKind::Map: {
      std::vector<Sym> args;
      for (size_t i = 1; i < it->items.size(); ++i) {
        Sym v = iter_next(it->items[i]);
        if (!v) break;
        args.push_back(std::move(v));
      }
      if (args.size() + 1 == it->items.size() && !args.empty()) r = call(it->items[0], std::move(args), {});
      break;
    }
    case IterKind::Chain:
      // NB: as CPython's chain, iter() of each iterable when reached (a list appended to before then
      // is read with its new items).
      while (!r && static_cast<size_t>(it->pos) < it->items.size()) {
        if (!it->origin && it->flag) {  // from_iterable: the next iterable from the outer iterator
          Sym next = iter_next(it->items[0]);
          if (!next) break;
          it->origin = get_iter(next);
        }
        if (!it->origin) it->origin = get_iter(it->items[static_cast<size_t>(it->pos)]);
        r = iter_next(it->origin);
        if (!r) {
          it->origin = nullptr;
          if (!it->flag) ++it->pos;
        }
      }
      break;
    case IterKind::Islice: {
      // CPython's islice_next: skip to the next index (past `stop` too), end at `stop`, then step.
      bool more = true;
      for (; more && it->pos < it->start; ++it->pos) more = iter_next(it->items[0]) != nullptr;
      if (!more || (it->stop >= 0 && it->pos >= it->stop)) break;
      r = iter_next(it->items[0]);
      if (!r) break;
      ++it->pos;
      it->start += it->step;
      if (it->stop >= 0 && it->start > it->stop) it->start = it->stop;
      break;
    }
    case IterKind::Repeat:
      if (it->stop < 0 || it->pos < it->stop) {
        ++it->pos;
        r = it->items[0];
      }
      break;
    case IterKind::Protocol: {
      PyRef i = PyRef::steal(PyLong_FromLongLong(it->pos));
      try {
        r = subscript(it->origin, make_const(i.get()));
        ++it->pos;
      } catch (const RaisedInTrace& e) {
        if (!e.matches(PyExc_IndexError) && !(it->flag && e.matches(PyExc_StopIteration))) throw;
        r = nullptr;
      }
      break;
    }
    case IterKind::Native: {
      // NB: its rest is read off the real container, which does not have the trace's changes yet.
      if (native_iterator_container_changed(it))
        brk(BreakKind::UnsupportedIteration, "an iterator passed in over a container the compiled code changed");
      // NB: guarded on there being at least one more item (not on how many): a loop resumed
      // after each graph break compiles once, not once per position.
      PyRef rest = PyRef::steal(iterator_rest(it->obj.get()));
      FF_CHECK(rest, "the rest of an iterator passed in");
      auto rs = std::make_shared<Source>();
      rs->kind = Source::Kind::IterRest;
      rs->base = it->source;
      if (it->pos < PyTuple_GET_SIZE(rest.get())) {
        guard(Guard::Kind::LenAtLeast, rs, nullptr, it->pos + 1);
        PyRef idx = PyRef::steal(PyLong_FromLongLong(it->pos));
        r = wrap(PyTuple_GET_ITEM(rest.get(), it->pos), item_source(rs, idx.get()));
        ++it->pos;
        note_appended(it);
      } else {
        guard(Guard::Kind::LenMatch, rs, nullptr, it->pos);
      }
      break;
    }
    case IterKind::Generator: {
      Frame& f = *it->frame;
      try {
        run_frame(f);
      } catch (const RaisedInTrace& e) {
        throw GraphBreak(e.info());  // the generator is not left half-run for a caller that catches it
      }
      if (f.suspended) {
        f.suspended = false;
        r = std::move(f.yielded);
      } else {
        it->frame.reset();  // returned: StopIteration from now on
      }
      break;
    }
    case IterKind::Filter: {
      const Sym& fn = it->items[0];
      bool identity = fn->is(SymKind::Const) && fn->obj.get() == Py_None;
      while (Sym v = iter_next(it->items[1])) {
        if (truth(identity ? v : call(fn, {v}, {}))) {
          r = std::move(v);
          break;
        }
      }
      break;
    }
  }
  if (!r) it->exhausted = true;
  return r;
}

bool SymbolicTracer::native_iterator_container_changed(const Sym& it) {
  std::string_view type = Py_TYPE(it->obj.get())->tp_name;
  if (type == "list_iterator" || type == "list_reverseiterator") {
    PyRef r = PyRef::steal(PyObject_CallMethod(it->obj.get(), "__reduce__", nullptr));
    PyObject* args = r && PyTuple_Check(r.get()) && PyTuple_GET_SIZE(r.get()) >= 2 ? PyTuple_GET_ITEM(r.get(), 1) : nullptr;
    PyErr_Clear();
    if (!args || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 1) return false;
    auto known_sym = by_identity_.find(PyTuple_GET_ITEM(args, 0));
    if (known_sym == by_identity_.end()) return false;
    return std::find(mutated_containers_.begin(), mutated_containers_.end(), known_sym->second) != mutated_containers_.end();
  }
  if (type == "dict_keyiterator" || type == "dict_valueiterator" || type == "dict_itemiterator" || type == "set_iterator") {
    // Their __reduce__ copies the rest: the container cannot be told apart, so any change counts.
    for (const PendingEffect& e : effects_)
      if (e.kind == SideEffect::Kind::DictSetItem || e.kind == SideEffect::Kind::DictDelItem) return true;
    for (const Sym& c : mutated_containers_)
      if (c->is(SymKind::Set) || (c->is(SymKind::Appendable) && PyAnySet_Check(c->obj.get()))) return true;
  }
  return false;
}

Sym SymbolicTracer::reversed_of(const Sym& v) {
  materialize(v);
  switch (v->kind) {
    case SymKind::List:
    case SymKind::Tuple: {
      Sym it = make_iterator(IterKind::Reversed, {}, v);
      it->pos = static_cast<int64_t>(v->items.size()) - 1;
      return it;
    }
    case SymKind::Dict:
    case SymKind::DictView: {
      // NB: reversed(dict) reads the keys as they are now; it is only used where nothing changes the
      // dict before the iteration ends (a change breaks, as for the forward iterators).
      std::vector<Sym> items = iterate(v);
      std::reverse(items.begin(), items.end());
      return make_iterator(IterKind::Items, std::move(items));
    }
    case SymKind::Const:
      if (PyRange_Check(v->obj.get()) || PyUnicode_Check(v->obj.get()) || PyTuple_Check(v->obj.get()) ||
          PyBytes_Check(v->obj.get())) {
        if (PyRange_Check(v->obj.get())) {  // the reversed range, as a range
          PyRef step = PyRef::steal(PySlice_New(nullptr, nullptr, PyRef::steal(PyLong_FromLong(-1)).get()));
          PyRef r = PyRef::steal(PyObject_GetItem(v->obj.get(), step.get()));
          FF_CHECK(r, "range[::-1]");
          return get_iter(make_const(r.get()));
        }
        std::vector<Sym> items = iterate(v);
        std::reverse(items.begin(), items.end());
        return make_iterator(IterKind::Items, std::move(items));
      }
      break;
    default:
      break;
  }
  brk(BreakKind::UnsupportedIteration, "reversed() of " + describe_sym(v));
}

std::vector<Sym> SymbolicTracer::iterate(const Sym& v) {
  if (Sym d = mapping_part(v, "__iter__")) return iterate(d);
  materialize(v);
  if (Sym it = object_iter(v)) return iterate(it);
  switch (v->kind) {
    case SymKind::Tuple:
    case SymKind::List:
      return v->items;
    case SymKind::Set:
      return set_elements(v);
    case SymKind::Dict:
      return v->keys;
    case SymKind::DictView: {
      const Sym& d = v->items[0];
      if (v->name == "keys") return d->keys;
      if (v->name == "values") return d->items;
      std::vector<Sym> pairs;
      for (size_t i = 0; i < d->keys.size(); ++i) pairs.push_back(make_tuple({d->keys[i], d->items[i]}));
      return pairs;
    }
    case SymKind::Iterator: {
      if (v->iter == IterKind::Repeat && v->stop < 0) brk(BreakKind::UnsupportedIteration, "all of an endless itertools.repeat");
      std::vector<Sym> out;
      while (Sym s = iter_next(v)) out.push_back(std::move(s));
      return out;
    }
    case SymKind::Object:
    case SymKind::Const: {
      PyObject* o = v->obj.get();
      if (v->is(SymKind::Object)) {
        if (auto items = module_container_items(v)) return *items;
        if (!is_frozen_view(v)) break;
      } else if (!(is_plain_const(o) || PyList_CheckExact(o) || PyDict_CheckExact(o) || PySet_CheckExact(o) ||
                   PyFrozenSet_CheckExact(o))) {
        break;
      }
      PyRef it = PyRef::steal(PyObject_GetIter(o));
      if (!it) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, describe_sym(v) + " is not iterable");
      }
      std::vector<Sym> out;
      while (PyObject* item = PyIter_Next(it.get())) {
        out.push_back(wrap(item, nullptr));
        Py_DECREF(item);
      }
      if (PyErr_Occurred()) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, "iteration raises");
      }
      return out;
    }
    case SymKind::Tensor: {
      if (v->meta.dim() == 0) brk(BreakKind::RaisesInTrace, "iteration over a 0-d tensor");
      std::vector<Sym> out;
      for (int64_t i = 0; i < v->meta.sizes[0]; ++i) out.push_back(subscript(v, make_const_steal(PyLong_FromLongLong(i))));
      return out;
    }
    default:
      break;
  }
  brk(BreakKind::UnsupportedIteration, describe_sym(v));
}

}  // namespace ff
