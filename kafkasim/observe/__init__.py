"""kafkasim: what the simulator exposes: Prometheus metrics, the hosts' exporters, audit records, ground truth."""
