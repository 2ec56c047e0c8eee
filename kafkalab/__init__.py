"""``guardian lab``: real Apache Kafka 4.x brokers on this machine, set up as production brokers are.

:mod:`kafkalab.lab` starts and stops a lab (see its docstring); :mod:`kafkalab.cli` is the command group.
The package knows none of Guardian's control-plane packages: it writes the same endpoints document an
operator registers, and Guardian governs the lab through it like any other cluster.
"""
