#!/usr/bin/env python3
"""Import cycles between the files of each crate of the workspace; exits 1 if there is one.

A file uses another when it names an item the other defines: through `crate::`, `super::`
or `self::` paths, or a module file's bare paths to its children (`use columns::X;` in a
`lib.rs`), re-exports followed to the defining file. A `lib.rs`/`mod.rs` may declare and
re-export its children; a child that then uses an item defined in its parent is a cycle.
`#[cfg(test)] mod tests` at the end of a file is not counted (tests may use anything).

Usage: python3 .ci/import-cycles.py [workspace root]
"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else '.'
crates = []
for dp, dn, fn in os.walk(root):
    dn[:] = [d for d in dn if d not in ('target', '.git')]
    if 'Cargo.toml' in fn and os.path.isdir(os.path.join(dp, 'src')):
        crates.append(os.path.join(dp, 'src'))
def modpath(src, f):
    rel = os.path.relpath(f, src)[:-3].split('/')
    if rel[-1] in ('mod', 'lib', 'main'): rel = rel[:-1]
    return tuple(rel)
def strip(text):
    i = text.find('#[cfg(test)]\nmod tests')
    if i >= 0: text = text[:i]
    return re.sub(r'//.*', '', text)
DEF = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:struct|enum|fn|trait|const|type|static|union|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)', re.M)
total = 0
for src in sorted(crates):
    files = {}
    for dp, dn, fn in os.walk(src):
        for f in fn:
            if f.endswith('.rs'): files[modpath(src, os.path.join(dp, f))] = os.path.join(dp, f)
    texts = {m: strip(open(f).read()) for m, f in files.items()}
    defs = {}
    for m, t in texts.items():
        for n in DEF.findall(t): defs.setdefault(n, set()).add(m)
    mods = set(files)
    edges = {m: set() for m in mods}
    def resolve(m, path):
        # path: tuple of segments after crate:: (absolute)
        for k in range(len(path), -1, -1):
            if path[:k] in mods:
                rest = path[k:]
                if not rest: return path[:k]
                name = rest[0]
                owners = defs.get(name, set())
                if path[:k] in owners: return path[:k]
                if len(owners) == 1: return next(iter(owners))
                # prefer a descendant of the module
                cand = [o for o in owners if o[:k] == path[:k]]
                if len(cand) == 1: return cand[0]
                return path[:k] if k else None
        return None
    for m, t in texts.items():
        isdir = files[m].endswith(('mod.rs', 'lib.rs', 'main.rs'))
        here = m if isdir else m[:-1]   # the module whose children are siblings
        parent = here[:-1] if isdir else m[:-1]
        refs = []
        for kw, base in (('crate', ()), ('super', m[:-1] if not isdir else m[:-1]), ('self', m)):
            for g in re.finditer(r'\b%s::\{([^}]*(?:\{[^}]*\}[^}]*)*)\}' % kw, t):
                for x in re.split(r',(?![^{]*\})', g.group(1)):
                    x = x.strip().split(' as ')[0]
                    if not x: continue
                    if '{' in x:
                        head, inner = x.split('{', 1)
                        for y in inner.rstrip('}').split(','):
                            if y.strip(): refs.append(base + tuple(s for s in (head + y.strip()).split('::') if s))
                    else: refs.append(base + tuple(x.split('::')))
            for r in re.findall(r'\b%s::([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)' % kw, t):
                refs.append(base + tuple(r.split('::')))
        # Bare paths to child modules (`use columns::X;` in lib.rs / mod.rs).
        if isdir:
            for child in [x for x in mods if len(x) == len(m) + 1 and x[:len(m)] == m]:
                for g in re.finditer(r'(?<![A-Za-z0-9_:])%s::\{([^}]*)\}' % child[-1], t):
                    for x in g.group(1).split(','):
                        x = x.strip().split(' as ')[0]
                        if x: refs.append(child + tuple(x.split('::')))
                for r in re.findall(r'(?<![A-Za-z0-9_:])%s::([A-Za-z_][A-Za-z0-9_]*)' % child[-1], t):
                    refs.append(child + (r,))
        for r in refs:
            tgt = resolve(m, r)
            if tgt is not None and tgt != m: edges[m].add(tgt)
    index = {}; low = {}; st = []; on = set(); out = []; c = [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        index[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in edges[v]:
            if w not in index: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(comp)
    for v in sorted(mods):
        if v not in index: sc(v)
    for comp in out:
        total += 1
        print(f"{os.path.relpath(src, root)}: cycle among {sorted('::'.join(x) or 'lib' for x in comp)}")
        for a in sorted(comp):
            for b in sorted(edges[a]):
                if b in comp: print(f"    {'::'.join(a) or 'lib'} -> {'::'.join(b) or 'lib'}")
print(f"{total} import cycle(s) between files")
sys.exit(1 if total else 0)
