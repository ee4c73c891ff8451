"""Groups `perf script -F comm,pid,ip,sym,dso` samples by process and by the crate of the leaf
frame (kernel, pingora, malloc, tokio, tracing, pforte, rustls, other), as docs/performance.md
reports them. Usage: perf script -i perf.data -F comm,pid,ip,sym,dso | python3 tests/perf/group.py
"""
import sys, re, collections
cats=[('kernel',lambda s,d:'kernel' in d or d.startswith('[')),
      ('malloc',lambda s,d:'jemalloc' in s or 'je_' in s or 'malloc' in s or 'free' in s or 'memcpy' in s or 'memmove' in s or 'libc' in d),
      ('rustls/crypto',lambda s,d:'rustls' in s or 'ring' in s or 'aws_lc' in s or 'aes' in s.lower() or 'gcm' in s.lower()),
      ('tokio',lambda s,d:'tokio' in s or 'mio' in s),
      ('pingora',lambda s,d:'pingora' in s or 'httparse' in s or 'http::' in s),
      ('tracing/log',lambda s,d:'tracing' in s),
      ('pforte',lambda s,d:'pforte' in s),]
per=collections.defaultdict(collections.Counter)
pid=None; leaf=None
for line in sys.stdin:
    if not line.strip():
        pid=None; continue
    if not line.startswith((' ','\t')):
        m=re.search(r"(\d+)\s*$",line); pid=m.group(1) if m else None; leaf=True; continue
    if leaf and pid:
        parts=line.strip().split(' ',1)
        rest=parts[1] if len(parts)>1 else ''
        m=re.match(r'(.*) \((.*)\)$',rest); sym,dso=(m.group(1),m.group(2)) if m else (rest,'')
        c='other'
        for name,f in cats:
            if f(sym,dso): c=name; break
        per[pid][c]+=1; leaf=False
for p,c in per.items():
    tot=sum(c.values()); print(p,tot,' '.join(f"{k} {100*v/tot:.0f}%" for k,v in c.most_common()))
