"""The engine: what runs jobs. It sees a bound queue only through the source interface
(:class:`varmq.sources.base.Source`), never a concrete kind.

- :mod:`~varmq.engine.dispatch`: lifecycle state, slots, and the step that gives a slot its
  next job (:mod:`~varmq.engine.strategies` picks among several queues);
- :mod:`~varmq.engine.fastpath`: how an in-memory job skips that step;
- :mod:`~varmq.engine.thread_runner`, :mod:`~varmq.engine.async_runner`: where job functions
  run;
- :mod:`~varmq.engine.timer`: the one thread that acts because time passed;
- :mod:`~varmq.engine.waits`: the worker's waits;
- :mod:`~varmq.engine.pools`: the library's producer threads.
"""
