"""The seed format, finding seeds, the parity grid and its inputs."""
