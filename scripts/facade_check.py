"""Types in the public API of the `vramguard` facade that a user cannot name through it, and
public types of no use. Reads the rustdoc JSON of vramguard-runtime and of vramguard (see
scripts/facade-check.sh, which makes them and runs this). Exits 1 when it finds either.
"""
import json
import sys

rt=json.load(open(sys.argv[1])); fa=json.load(open(sys.argv[2]))
ridx=rt['index']; rpaths=rt['paths']
# runtime path -> id for local items
by_path={}
for i,p in rpaths.items():
    if p['crate_id']==0: by_path['::'.join(p['path'])]=i
def children_of_module(mid):
    it=ridx.get(str(mid)) or ridx.get(mid)
    return it['inner']['module']['items'] if it and 'module' in it['inner'] else []
exposed={}  # runtime id -> facade path
def expose(rid, fpath, depth=0):
    rid=str(rid)
    if rid in exposed: return
    exposed[rid]=fpath
    it=ridx.get(rid)
    if not it: return
    if 'module' in it['inner']:
        for c in it['inner']['module']['items']:
            ci=ridx.get(str(c))
            if not ci or ci.get('visibility')!='public': continue
            if 'use' in ci['inner']:
                u=ci['inner']['use']
                if u['id'] is None: continue
                if u['is_glob']: expose(u['id'], fpath, depth+1)  # glob of module: contents
                else: expose(u['id'], fpath+'::'+u['name'])
            else:
                expose(c, fpath+'::'+(ci.get('name') or '?'))
# facade: walk its modules
fidx=fa['index']; fpaths=fa['paths']
rt_crate_ids={k for k,v in fa['external_crates'].items() if v['name']=='vramguard_runtime'}
def facade_walk(mid, fpath):
    it=fidx[str(mid)]
    for c in it['inner']['module']['items']:
        ci=fidx[str(c)]
        if ci.get('visibility')!='public': continue
        inner=ci['inner']
        if 'module' in inner: facade_walk(c, fpath+'::'+ci['name'])
        elif 'use' in inner:
            u=inner['use']; tid=u['id']
            if tid is None: continue
            p=fpaths.get(str(tid))
            if p and str(p['crate_id']) in rt_crate_ids:
                rid=by_path.get('::'.join(['vramguard_runtime']+p['path'][1:]))
                if rid is None: print('  (unresolved re-export)', p['path']); continue
                if u['is_glob']:
                    for c2 in children_of_module(rid):
                        c2i=ridx.get(str(c2))
                        if c2i and c2i.get('visibility')=='public':
                            if 'use' in c2i['inner']:
                                uu=c2i['inner']['use']
                                if uu['id'] is not None: expose(uu['id'], fpath+'::'+uu['name'])
                            else: expose(c2, fpath+'::'+c2i['name'])
                else: expose(rid, fpath+'::'+u['name'])
            elif p and p['crate_id']==0:
                pass
facade_walk(fa['root'], 'vramguard')
# now collect ids referenced by signatures of exposed items
def ids_in(x, out):
    if isinstance(x, dict):
        if 'path' in x and 'id' in x and isinstance(x.get('id'), int): out.add(str(x['id']))
        for v in x.values(): ids_in(v, out)
    elif isinstance(x, list):
        for v in x: ids_in(v, out)
missing={}
def sig_ids(it):
    out=set(); inner=it['inner']
    k=next(iter(inner))
    v=inner[k]
    if k=='function': ids_in(v['sig'], out); ids_in(v['generics'], out)
    elif k in('struct_field',): ids_in(v, out)
    elif k=='constant': ids_in(v.get('type'), out)
    elif k=='static': ids_in(v.get('type'), out)
    elif k=='type_alias': ids_in(v.get('type'), out)
    elif k=='assoc_type': ids_in(v, out)
    return out
def members(it):
    inner=it['inner']; k=next(iter(inner)); v=inner[k]; ms=[]
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
        if v.get('trait') is None or True: ms+=v['items']
    return ms
seen=set()
def visit(rid, where):
    if rid in seen: return
    seen.add(rid)
    it=ridx.get(rid)
    if not it: return
    inner=it['inner']; k=next(iter(inner))
    if k=='impl':
        v=inner[k]
        # trait impls of external traits: only items; inherent impls: public items
        if v.get('is_synthetic') or v.get('blanket_impl'): return
    if it.get('visibility') not in ('public','default') and k not in('impl','variant'): return
    for t in sig_ids(it):
        if t not in exposed and rpaths.get(t,{}).get('crate_id')==0:
            missing.setdefault('::'.join(rpaths[t]['path']),set()).add(where)
    for m in members(it): visit(str(m), where)
for rid,fp in list(exposed.items()): visit(rid, fp)
# Exposed types a user can do nothing with: no public field, no public inherent method, no
# trait implemented beyond the derivable ones, and in no signature of another exposed item.
in_signatures=set()
for rid in seen:
    it=ridx.get(rid)
    if it: in_signatures|=sig_ids(it)
DERIVABLE={'Debug','Clone','Copy','PartialEq','Eq','Hash','PartialOrd','Ord','Default','Send','Sync','Unpin','UnwindSafe','RefUnwindSafe','Freeze','StructuralPartialEq','Any','Borrow','BorrowMut','From','Into','TryFrom','TryInto','ToOwned','CloneToUninit','Same'}
useless=[]
for rid,fp in exposed.items():
    it=ridx.get(rid)
    if not it: continue
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
