#!/usr/bin/env python3
"""Generates include/runhooks/detail/near_miss.hpp: the names one slip away from a hook point.

C++ cannot list a class's members, so runhooks probes a hook for a finite list of names, each
a likely misspelling of one of the six hook points (on_exception since issue 27). The rule, as the README states it:

  * case and underscores: every spelling of a point's words in another case (`End`,
    `After_run`, `After_Run`, `after_Run`, `AfterRun`, `afterRun`, `Afterrun`) or joined
    (`afterrun`), with or without one leading or trailing underscore (`after_run_`,
    `_before_run`, `AfterRun_`);
  * for the points of five letters or more (all but `end`): one typo in the lower-case name,
    that is one character deleted (`befor_run`, `aftercreate_session`), one letter doubled,
    two adjacent characters swapped (`begni`), or an `s` / `ed` appended.

Left out, and why:
  * the points themselves;
  * names in capitals (`END`, `AFTER_RUN`): members in capitals are enumerators and
    constants, and capitals are the macros' namespace, where a user's `#define BEGIN` would
    break the generated header;
  * identifiers reserved to the implementation (a double underscore, or `_` and a capital);
  * `begin_`, `end_`, `_begin`, `_end`: common names of private data members, which runhooks
    cannot tell from member functions (access hides what a private member is);
  * ordinary words a hook may define for its own reasons (ORDINARY_WORDS below).

Usage: tools/gen_near_miss.py           rewrite the header
       tools/gen_near_miss.py --check   exit 1 if the committed header is not what this writes
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "include", "runhooks", "detail", "near_miss.hpp")

POINTS = ["begin", "after_create_session", "before_run", "after_run", "end", "on_exception"]
TYPO_MIN_LETTERS = 5
PRIVATE_DATA_NAMES = {"begin_", "end_", "_begin", "_end"}
ORDINARY_WORDS = {"begins", "ended", "ends", "send", "and", "run", "runs"}


def case_forms(point):
    """The point's words in other cases, kept apart by underscores or joined."""
    words = point.split("_")
    lower = [w.lower() for w in words]
    title = [w.capitalize() for w in words]
    cased = [
        lower,                              # after_run, afterrun
        [title[0]] + lower[1:],             # After_run, Afterrun
        title,                              # After_Run, AfterRun
        [lower[0]] + title[1:],             # after_Run, afterRun
    ]
    forms = []
    for ws in cased:
        for sep in ("_", ""):
            forms.append(sep.join(ws))
    return forms


def underscore_forms(name):
    return [name, "_" + name, name + "_"]


def typos(point):
    """One typo in the lower-case point: a deletion, a doubling, an adjacent swap, a suffix."""
    out = []
    for i in range(len(point)):
        out.append(point[:i] + point[i + 1:])                 # deletion
        out.append(point[:i] + point[i] + point[i:])          # doubling
        if i + 1 < len(point):
            out.append(point[:i] + point[i + 1] + point[i] + point[i + 2:])  # swap
    out += [point + "s", point + "ed"]
    return out


def reserved(name):
    return "__" in name or re.match(r"_[A-Z]", name) is not None


def acceptable(name):
    return (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None
            and not reserved(name)
            and name.upper() != name            # no capitals-only names (END, AFTER_RUN)
            and name not in POINTS
            and name not in PRIVATE_DATA_NAMES
            and name not in ORDINARY_WORDS)


def candidates():
    """(name, point) pairs in a stable order, each name once."""
    found = {}
    for point in POINTS:
        names = []
        for form in case_forms(point):
            names += underscore_forms(form)
        if sum(c.isalpha() for c in point) >= TYPO_MIN_LETTERS:
            names += typos(point)
        for name in names:
            if not acceptable(name):
                continue
            other = found.get(name)
            if other is not None and other != point:
                sys.exit(f"gen_near_miss.py: `{name}` is near both `{other}` and `{point}`")
            found.setdefault(name, point)
    return list(found.items())


def message(name, point):
    return (f"runhooks: the hook has a member function `{name}`, which looks like a misspelt "
            f"`{point}` and would never be called. Rename it `{point}`, or give it a name "
            f"further from the hook points (data members and types may have such names, but "
            f"not private data members: runhooks cannot tell what those are).")


def cxx_string(text, indent):
    """text as adjacent string literals of lines that fit in 100 columns."""
    words, lines, line = text.split(" "), [], ""
    width = 100 - indent - 3
    for word in words:
        piece = word if not line else line + " " + word
        if len(piece) + 1 > width and line:
            lines.append(line + " ")
            line = word
        else:
            line = piece
    lines.append(line)
    pad = " " * indent
    return "\n".join(pad + '"' + l.replace("\\", "\\\\").replace('"', '\\"') + '"' for l in lines)


def render():
    names = candidates()
    n = len(names)
    out = []
    w = out.append
    w("// The names one slip away from a hook point (`afterrun`, `End`, `after_run_`, `befor_run`),")
    w("// and check_near_misses, which rejects a hook with a member function of such a name: it")
    w("// would never be called. Data members and types of these names are allowed.")
    w("//")
    w("// Generated by tools/gen_near_miss.py, do not edit: to change the names, change the script")
    w("// and run it (it rewrites this file); the test near_miss_header (`tools/gen_near_miss.py")
    w("// --check`, suite docs) fails when the two differ. The rule is in the script's docstring.")
    w("// Checked in, not written at configure time: runhooks is header-only and is used from an")
    w("// install or a source tree (Meson subproject, CMake add_subdirectory) by builds that need")
    w("// not have Python, and the list depends on nothing of the build. Nor computed at compile")
    w("// time: C++ cannot make identifiers, and a spelled-out list is the cheapest to compile.")
    w("#pragma once")
    w("")
    w("#include <type_traits>")
    w("")
    w("namespace runhooks::detail {")
    w("")
    w(f"inline constexpr int near_miss_count = {n};")
    w("")
    w("// Every name, as an enumerator. A class deriving from a hook and from this one sees an")
    w("// ambiguous name iff the hook has a member of that name, of any kind and any access (as in")
    w("// RUNHOOKS_DETAIL_NAME_PROBE): one class per hook type tests all the names.")
    w("struct near_miss_probe {")
    w("  enum {")
    for name, _ in names:
        w(f"    {name},")
    w("  };")
    w("};")
    w("")
    w("// Every name as a type. Lookup of a name before `::` considers only types, so deriving from")
    w("// a hook and from this one makes `name::type` ambiguous iff the hook's member is a type,")
    w("// whatever its access. Only instantiated for a hook that has one of the names.")
    w("struct near_miss_type_probe_tag {")
    w("  using type = void;")
    w("};")
    w("struct near_miss_type_probe {")
    for name, _ in names:
        w(f"  using {name} = near_miss_type_probe_tag;")
    w("};")
    w("")
    w("template <class Hook>")
    w("struct near_miss_probed : Hook, near_miss_probe {};")
    w("template <class Hook>")
    w("struct near_miss_type_probed : Hook, near_miss_type_probe {};")
    w("")
    w("// What `Hook::name` is when it is fine: a data member, a static one or an enumerator.")
    w("template <class T>")
    w("concept near_miss_value = !std::is_function_v<std::remove_reference_t<T>>;")
    w("")
    w("struct near_miss_set {")
    w("  bool misspelt[near_miss_count];")
    w("  bool any;")
    w("};")
    w("")
    w("// True for a hook with none of the names, the common case: one requires-expression.")
    w("template <class Probed>")
    w("concept near_miss_free = requires {")
    for name, _ in names:
        w(f"  Probed::{name};")
    w("};")
    w("")
    w("// Which names the hook has as member functions (overloaded, templates, static, any access).")
    w("// A name is fine when `Hook::name` is an expression but not a function (a data member, a")
    w("// static one, an enumerator), or when it is a type. A private data member cannot be told")
    w("// from a function, so it counts as one.")
    w("template <class Hook>")
    w("consteval near_miss_set find_near_misses() {")
    w("  near_miss_set found{};")
    w("  if constexpr (std::is_class_v<Hook> && !std::is_final_v<Hook>) {")
    w("    using Probed = near_miss_probed<Hook>;")
    w("    using TypeProbed = near_miss_type_probed<Hook>;")
    w("    if constexpr (!near_miss_free<Probed>) {")
    for i, (name, _) in enumerate(names):
        w(f"      if constexpr (!requires {{ Probed::{name}; }})")
        w(f"        found.misspelt[{i}] = !requires {{ {{ Hook::{name} }} -> near_miss_value; }} &&")
        w(f"{' ' * (27 + len(str(i)))}requires {{ typename TypeProbed::{name}::type; }};")
    w("      for (bool misspelt : found.misspelt) found.any = found.any || misspelt;")
    w("    }")
    w("  }")
    w("  return found;")
    w("}")
    w("")
    w("template <class Hook>")
    w("inline constexpr near_miss_set near_misses_of = find_near_misses<std::remove_cv_t<Hook>>();")
    w("")
    w("// check_hook's entry. True for a hook without any of the names as a member function; for one")
    w("// with, the specialization below, whose instantiation note names the hook.")
    w("template <class Hook, bool = near_misses_of<Hook>.any>")
    w("struct check_near_misses {")
    w("  static constexpr bool value = true;")
    w("};")
    w("")
    w("// One static_assert per name: exactly one per misspelt member fails.")
    w("template <class Hook>")
    w("struct check_near_misses<Hook, true> {")
    for i, (name, point) in enumerate(names):
        w(f"  static_assert(!near_misses_of<Hook>.misspelt[{i}],")
        w(cxx_string(message(name, point), 16) + ");")
    w("  static constexpr bool value = true;")
    w("};")
    w("")
    w("}  // namespace runhooks::detail")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if the committed header differs from what this writes")
    parser.add_argument("--list", action="store_true", help="print the names and exit")
    args = parser.parse_args()
    if args.list:
        for name, point in candidates():
            print(f"{name} -> {point}")
        return 0
    text = render()
    if args.check:
        try:
            with open(HEADER, encoding="utf-8") as f:
                current = f.read()
        except OSError as error:
            print(f"gen_near_miss.py: cannot read {HEADER}: {error}", file=sys.stderr)
            return 1
        if current != text:
            print(f"gen_near_miss.py: {os.path.relpath(HEADER, ROOT)} is stale; run "
                  f"tools/gen_near_miss.py and commit the result", file=sys.stderr)
            return 1
        print(f"ok: {os.path.relpath(HEADER, ROOT)} is up to date ({len(candidates())} names)")
        return 0
    with open(HEADER, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(HEADER, ROOT)} ({len(candidates())} names)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
