"""The stages of :meth:`collectors.builder.LoadModel.build`, one module per group, in round order.

1. :mod:`~collectors.build.topology` — payloads -> brokers (and the sample clock); known brokers.
2. :mod:`~collectors.build.disks` — log-dir facts, device map, disk rates, memory gauges.
3. :mod:`~collectors.build.partition_rates` — the partition index; partition and topic counters.
4. :mod:`~collectors.build.reads` — consumer positions; residence time T; which fetches read disk.
5. :mod:`~collectors.build.methods` — messages-in, bytes-in, bytes-out and the method of each.
6. :mod:`~collectors.build.behaviours` — replica layout; six behaviours per disk; copies in flight.
7. :mod:`~collectors.build.assemble` — brokers and disks; topics; coverage.
8. :mod:`~collectors.build.windows` — history windows and every disk's ``load_history``.

Shared by the stages: :mod:`~collectors.build.names` (metric families, method codes),
:mod:`~collectors.build.records` (records crossing stages and the round's result),
:mod:`~collectors.build.state` (what survives between rounds), :mod:`~collectors.build.series`
(label strings -> ids, one family of every broker -> rates).

Every stage is a function of its explicit arguments: the round's arrays and records, plus the
long-lived records it may update (rate tracker, holds, books). No stage does I/O.
"""
