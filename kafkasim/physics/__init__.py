"""kafkasim: the tick: vectorised engine, replica copies, leased lines between IDCs."""
