"""One module per `railyard` sub-command; each exposes `register(subparsers)`."""
