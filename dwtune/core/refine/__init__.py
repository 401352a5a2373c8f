"""The refine stage's decisions (pure: numpy, scipy): from a pair's trained points to its next
step and its transition N*. :mod:`dwtune.study.refine` trains and records; this package decides.

Modules, each importing only those listed after it (pyproject.toml's "Refine:" contract):

- :mod:`.transition`: a pair's transition record (a transitions.parquet row) and statement;
  :mod:`.early`: the early sign decision from partial curves (``refine.early_stop``);
- :mod:`.steps`: the step policy (verify, extend, scan, bisect, close);
- :mod:`.probes`: scan and support probes beside a bracket; :mod:`.design`: the design
  strategies (grid, law): first sizes, later waves, the step beyond a bracket and inside it;
- :mod:`.outcome`: each point's sign under the pair's noise, and the pair's outcome;
  :mod:`.estimate`: N* with its intervals from every point;
- :mod:`.first_points`: a pair's first points and its extended size trend;
  :mod:`.stick`: broken sticks through zero (kink test, profile band, local line);
- :mod:`.points`: a pair's points (paired Δ per seed) from trial records;
- :mod:`.trend`: the shallower depth's size trend;
- :mod:`.signs`: the one sign rule and run classification;
- :mod:`.noise`: the pair's noise learned from its seeds;
- :mod:`.sequential`: α-spending boundaries of the repeated sign test.

The rules are stated in docs/statistics.md; measured figures live in benchmarks/README.md.
"""
