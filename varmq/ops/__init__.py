"""Operations: what operators use, all outside the path of a job and reading through the
workers' public surface.

- :mod:`~varmq.ops.view`: the one view of workers and queues that the rest show;
- :mod:`~varmq.ops.rest`: the REST API (ASGI and WSGI); :mod:`~varmq.ops.prometheus`: the
  Prometheus collector; :mod:`~varmq.ops.cli`: the ``varmq`` command;
- :mod:`~varmq.ops.service`: running workers as a service (``varmq.run``);
- :mod:`~varmq.ops.stores`: opening a store by URL through the adapter its scheme names.
"""
