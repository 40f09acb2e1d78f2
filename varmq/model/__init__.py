"""Values and rules: what jobs, records, errors, states and policies are. No threads are started
and no storage is called here; everything above builds on it.

- :mod:`~varmq.model.errors`, :mod:`~varmq.model.states`: every exception; lifecycle states;
- :mod:`~varmq.model.jobs`, :mod:`~varmq.model.groups`: what a job function receives and the
  handles ``add``/``add_all`` return;
- :mod:`~varmq.model.records`: job records as values, outcomes as JSON bytes;
- :mod:`~varmq.model.retry`: the retry policy and what a run's end is;
- :mod:`~varmq.model.metrics`, :mod:`~varmq.model.strategy`: counters; strategies' names;
- :mod:`~varmq.model.validate`: the checks every option goes through;
- :mod:`~varmq.model.loops`: which threads run jobs, and waking coroutines of other loops.
"""
