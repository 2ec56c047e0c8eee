"""kafkasim: federations to run: scenario files, the snapshot generator, the realistic deployment."""
