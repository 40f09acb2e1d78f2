"""What the core and every storage adapter share: the one part of varmq an adapter imports.

Standard library only, and nothing of the rest of varmq:

- :mod:`~varmq.contract.protocols`: the storage contract (``typing.Protocol`` interfaces,
  their limits and defaults, the dictionaries they return);
- :mod:`~varmq.contract.envelope`: the JSON envelope a job is stored in, its only writer and
  reader in Python;
- :mod:`~varmq.contract.topic_names`: topic names, patterns and the trie that matches them;
- :mod:`~varmq.contract.rules`: the argument and option rules with their messages;
- :mod:`~varmq.contract.stored_settings`: the settings that define a queue, stored with it by
  its first opener and shared by every later one;
- :mod:`~varmq.contract.batching`: group commit, one write for the calls of many threads;
- :mod:`~varmq.contract.observe`: the slot tracing and log context plug into (empty unless
  something is installed), read by the core's adds and runs and by a storage topic's publish.

A third-party adapter may import these to behave exactly as the built-in ones do; the
protocols stay structural, so an adapter that implements the method shapes alone works too.
"""
