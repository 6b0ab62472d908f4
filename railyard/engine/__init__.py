"""The Pulumi engine Railyard runs on: the toolchain (built offline and cached) and its environment."""
