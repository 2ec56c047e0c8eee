"""kafkasim: the simulated clusters' state: topology model, configs, leader epochs, record batches, retention."""
