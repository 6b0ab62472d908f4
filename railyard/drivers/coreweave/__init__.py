"""The coreweave driver: CoreWeave bare metal through CKS, on the official SDK.

    config     the frozen dataclasses `railyard:coreweave` is parsed into (CoreWeaveConfig)
    catalog    which CoreWeave instance type each catalog SKU is, each with its sources
    rules      KEYS, parse(section, spec) and preflight(spec): the driver's DriverRules (Pulumi-free)
    nodepool   a pool's NodePool custom resource (Pulumi-free)
    driver     CoreWeaveDriver: the VPC, the CKS cluster, the bucket, the NodePools, the kubeconfig

The provider plugin cannot be built on machines that reach only the Go module proxy; the driver
is checked under Pulumi mocks and mypy, and its NodePools against a real API server
(docs/drivers.md, "The coreweave driver").
"""
