"""The pure model and planning layer: spec, catalog, topology, pairing, fabric, addressing.

Nothing in this package imports pulumi, ansible, a driver or the CLI (a test enforces it).
"""
