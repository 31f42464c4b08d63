python3 bench/results/gpu-2026-12-07-s17/table.py n/n n/m n2/m n2/n x  (after unpacking call1/n.tgz, call1/x.tgz, call2/n2.tgz in one folder)
