#!/usr/bin/env python3
# Import circles between the files of src/: each .rs file is a module (a
# folder's mod.rs is the folder; test-only files and inline #[cfg(test)]
# mods left out). Counts crate::/super:: paths, and in a parent module --
# written as foo/mod.rs or as foo.rs with its files in foo/ -- its
# child::item and self::child paths (`pub(in crate::…)` bounds are not
# imports and are ignored). Prints each strongly connected block
# of more than one file. Run: python3 scripts/import_circles.py . [edges]
# (with a second argument it also prints the edges inside each block).
import os,re,sys,collections
root=sys.argv[1]+'/src'
mods={}  # modpath tuple -> file
for dp,dn,fn in os.walk(root):
    for n in fn:
        if not n.endswith('.rs'): continue
        rel=os.path.relpath(os.path.join(dp,n),root)[:-3].split(os.sep)
        if rel[-1]=='mod': rel=rel[:-1]
        if rel in (['lib'],['main']): continue
        mods[tuple(rel)]=os.path.join(dp,n)
def strip(s):
    while True:
        m=re.search(r'#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{',s)
        if not m: break
        d=1;j=m.end()
        while d and j<len(s):
            d+= {'{':1,'}':-1}.get(s[j],0); j+=1
        s=s[:m.start()]+s[j:]
    s=re.sub(r'pub\(in [\w:]+\)','pub',s)  # a visibility bound, not an import
    return re.sub(r'//[^\n]*','',s)
def resolve(path):
    # longest prefix that is a module
    for k in range(len(path),0,-1):
        if tuple(path[:k]) in mods: return tuple(path[:k])
g=collections.defaultdict(set)
for mp,f in mods.items():
    n=os.path.basename(f)
    if n=='tests.rs' or n.endswith('_tests.rs') or n=='testutil.rs' or 'tests' in mp: continue
    s=strip(open(f).read())
    isdir=f.endswith('mod.rs')
    for m in re.finditer(r'\b(crate|super)((?:::\w+)+)',s):
        parts=m.group(2).split('::')[1:]
        if m.group(1)=='crate': base=[]
        else:
            base=list(mp) if isdir else list(mp[:-1])
            base=base[:-1] if isdir else base
            # super from file a/b.rs -> module a ; from a/b/mod.rs -> a
            base=list(mp[:-1])
        t=resolve(base+parts)
        if t and t!=mp: g[mp].add(t)
    # child::... and self::child::... paths (use lines and inline paths) in a
    # parent module, whether written as foo/mod.rs or as foo.rs with foo/
    haskids=any(len(k)>len(mp) and k[:len(mp)]==mp for k in mods)
    if haskids:
        for m in re.finditer(r'(?<![\w:])(?:self::)?(\w+)::',s):
            if m.group(1) in ('crate','super','self','std'): continue
            t=resolve(list(mp)+[m.group(1)])
            if t and t!=mp and len(t)>len(mp): g[mp].add(t)
        # grouped use self::{a::b, c} / use {a, b}
        for m in re.finditer(r'use (?:self::)?\{(.*?)\};',s,re.S):
            for it in re.findall(r'(?:^|,|\{)\s*(\w+(?:::\w+)*)',m.group(1)):
                t=resolve(list(mp)+it.split('::'))
                if t and t!=mp and len(t)>len(mp): g[mp].add(t)
    # grouped use crate::{a::b, c}
    for m in re.finditer(r'use (crate|super)::\{(.*?)\};',s,re.S):
        base=[] if m.group(1)=='crate' else list(mp[:-1])
        for it in re.findall(r'(?:^|,|\{)\s*(\w+(?:::\w+)*)',m.group(2)):
            t=resolve(base+it.split('::'))
            if t and t!=mp: g[mp].add(t)
idx={};low={};st=[];on=set();sccs=[];c=[0]
sys.setrecursionlimit(100000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in g[v]:
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        sccs.append(comp)
for v in list(mods):
    if v not in idx: sc(v)
for comp in sccs:
    if len(comp)>1:
        tops=sorted({x[0] for x in comp})
        print(len(comp),'tops=',tops,sorted('::'.join(x) for x in comp))
if len(sys.argv)>2:
    # print edges inside each circle
    for comp in sccs:
        if len(comp)>1:
            cs=set(comp)
            print('--', sorted('::'.join(x) for x in comp)[0])
            for v in sorted(comp):
                print('  ','::'.join(v),'->',sorted('::'.join(w) for w in g[v] if w in cs))
