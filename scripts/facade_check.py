"""Types in the public API of the `vramguard` facade that a user cannot name through it, and
public types of no use. Reads the rustdoc JSON of the runtime's crates (vramguard-alloc,
vramguard-memory, vramguard-tensor) and of vramguard, the facade last (see
scripts/facade-check.sh, which makes them and runs this). Exits 1 when it finds either.

An item is keyed by its crate and its id in that crate's JSON (`crate:id`): a type of one
runtime crate in another's signature is found through its path.
"""
import json
import sys

RUNTIME = {}  # crate name -> its rustdoc JSON
for path in sys.argv[1:-1]:
    doc = json.load(open(path))
    RUNTIME[doc['index'][str(doc['root'])]['name']] = doc
fa = json.load(open(sys.argv[-1]))
by_path = {}  # "crate::path" -> key, for every runtime crate's local items
for name, doc in RUNTIME.items():
    for i, p in doc['paths'].items():
        if p['crate_id'] == 0:
            by_path['::'.join(p['path'])] = f"{name}:{i}"


def key_of(crate, rid):
    """The key of id `rid` as crate `crate`'s JSON names it (None: not a runtime item)."""
    doc = RUNTIME[crate]
    p = doc['paths'].get(str(rid))
    if p is None or p['crate_id'] == 0:
        return f"{crate}:{rid}"
    ext = doc['external_crates'].get(str(p['crate_id']), {}).get('name')
    if ext not in RUNTIME:
        return None
    return by_path.get('::'.join([ext] + p['path'][1:]))


def item(key):
    crate, rid = key.split(':', 1)
    return RUNTIME[crate]['index'].get(rid)


def crate_of(key):
    return key.split(':', 1)[0]


def children_of_module(key):
    it = item(key)
    if not it or 'module' not in it['inner']:
        return []
    return [key_of(crate_of(key), c) for c in it['inner']['module']['items']]


exposed = {}  # key -> facade path


def expose(key, fpath):
    if key is None or key in exposed:
        return
    exposed[key] = fpath
    it = item(key)
    if not it:
        return
    if 'module' in it['inner']:
        for c in children_of_module(key):
            ci = item(c) if c else None
            if not ci or ci.get('visibility') != 'public':
                continue
            if 'use' in ci['inner']:
                u = ci['inner']['use']
                if u['id'] is None:
                    continue
                target = key_of(crate_of(c), u['id'])
                if u['is_glob']:
                    expose(target, fpath)  # glob of a module: its contents
                else:
                    expose(target, fpath + '::' + u['name'])
            else:
                expose(c, fpath + '::' + (ci.get('name') or '?'))


# facade: walk its modules
fidx = fa['index']
fpaths = fa['paths']
rt_crate_ids = {k: v['name'] for k, v in fa['external_crates'].items() if v['name'] in RUNTIME}


def facade_walk(mid, fpath):
    it = fidx[str(mid)]
    for c in it['inner']['module']['items']:
        ci = fidx[str(c)]
        if ci.get('visibility') != 'public':
            continue
        inner = ci['inner']
        if 'module' in inner:
            facade_walk(c, fpath + '::' + ci['name'])
        elif 'use' in inner:
            u = inner['use']
            tid = u['id']
            if tid is None:
                continue
            p = fpaths.get(str(tid))
            if p and str(p['crate_id']) in rt_crate_ids:
                crate = rt_crate_ids[str(p['crate_id'])]
                key = by_path.get('::'.join([crate] + p['path'][1:]))
                if key is None:
                    print('  (unresolved re-export)', p['path'])
                    continue
                if u['is_glob']:
                    for c2 in children_of_module(key):
                        c2i = item(c2) if c2 else None
                        if c2i and c2i.get('visibility') == 'public':
                            if 'use' in c2i['inner']:
                                uu = c2i['inner']['use']
                                if uu['id'] is not None:
                                    expose(key_of(crate_of(c2), uu['id']), fpath + '::' + uu['name'])
                            else:
                                expose(c2, fpath + '::' + c2i['name'])
                else:
                    expose(key, fpath + '::' + u['name'])


facade_walk(fa['root'], 'vramguard')
# now collect ids referenced by signatures of exposed items
def ids_in(x, out):
    if isinstance(x, dict):
        if 'path' in x and 'id' in x and isinstance(x.get('id'), int): out.add(x['id'])
        for v in x.values(): ids_in(v, out)
    elif isinstance(x, list):
        for v in x: ids_in(v, out)
missing={}
def sig_ids(key):
    """Keys of the runtime types in the signature of item `key`."""
    it=item(key); out=set(); inner=it['inner']
    k=next(iter(inner))
    v=inner[k]
    if k=='function': ids_in(v['sig'], out); ids_in(v['generics'], out)
    elif k in('struct_field',): ids_in(v, out)
    elif k=='constant': ids_in(v.get('type'), out)
    elif k=='static': ids_in(v.get('type'), out)
    elif k=='type_alias': ids_in(v.get('type'), out)
    elif k=='assoc_type': ids_in(v, out)
    return {k2 for k2 in (key_of(crate_of(key), i) for i in out) if k2}
def members(key):
    it=item(key); inner=it['inner']; k=next(iter(inner)); v=inner[k]; ms=[]
    if k=='struct':
        kind=v['kind']
        if 'plain' in kind: ms+=kind['plain']['fields']
        elif 'tuple' in kind: ms+=[f for f in kind['tuple'] if f is not None]
        ms+=v.get('impls',[])
    elif k=='enum': ms+=v['variants']+v.get('impls',[])
    elif k=='variant':
        kd=v['kind']
        if isinstance(kd,dict):
            if 'tuple' in kd: ms+=[f for f in kd['tuple'] if f is not None]
            if 'struct' in kd: ms+=kd['struct']['fields']
    elif k=='trait': ms+=v['items']
    elif k=='impl':
        ms+=v['items']
    return [key_of(crate_of(key), m) for m in ms]
seen=set()
def visit(rid, where):
    if rid is None or rid in seen: return
    seen.add(rid)
    it=item(rid)
    if not it: return
    inner=it['inner']; k=next(iter(inner))
    if k=='impl':
        v=inner[k]
        # trait impls of external traits: only items; inherent impls: public items
        if v.get('is_synthetic') or v.get('blanket_impl'): return
    if it.get('visibility') not in ('public','default') and k not in('impl','variant'): return
    for t in sig_ids(rid):
        if t not in exposed:
            crate, i = t.split(':', 1)
            missing.setdefault('::'.join(RUNTIME[crate]['paths'][i]['path']),set()).add(where)
    for m in members(rid): visit(m, where)
for rid,fp in list(exposed.items()): visit(rid, fp)
# Exposed types a user can do nothing with: no public field, no public inherent method, no
# trait implemented beyond the derivable ones, and in no signature of another exposed item.
in_signatures=set()
for rid in seen:
    if item(rid): in_signatures|=sig_ids(rid)
DERIVABLE={'Debug','Clone','Copy','PartialEq','Eq','Hash','PartialOrd','Ord','Default','Send','Sync','Unpin','UnwindSafe','RefUnwindSafe','Freeze','StructuralPartialEq','Any','Borrow','BorrowMut','From','Into','TryFrom','TryInto','ToOwned','CloneToUninit','Same'}
useless=[]
for rid,fp in exposed.items():
    it=item(rid)
    if not it: continue
    crate=crate_of(rid)
    ridx=RUNTIME[crate]['index']
    k=next(iter(it['inner']))
    if k not in('struct','enum'): continue
    v=it['inner'][k]
    if rid in in_signatures: continue
    if k=='enum': continue
    kind=v['kind']
    if 'plain' in kind and any(ridx.get(str(f),{}).get('visibility')=='public' for f in kind['plain']['fields']): continue
    if 'tuple' in kind and any(f is not None and ridx.get(str(f),{}).get('visibility')=='public' for f in kind['tuple']): continue
    usable=False
    for im in v.get('impls',[]):
        imi=ridx.get(str(im))['inner']['impl']
        if imi.get('trait') is None:
            if any(ridx.get(str(m),{}).get('visibility')=='public' for m in imi['items']): usable=True
        elif imi['trait']['path'].split('::')[-1] not in DERIVABLE: usable=True
    if not usable: useless.append(fp)
for fp in sorted(useless): print(f"{fp}: public, but nothing can be done with it (no public field, method or trait, in no signature)")
for name in sorted(missing):
    print(f"{name}: used by {sorted(missing[name])[:4]}")
print(f"{len(exposed)} runtime items public through the facade; {len(missing)} types in their signatures not nameable; {len(useless)} public types of no use")
sys.exit(1 if missing or useless else 0)
