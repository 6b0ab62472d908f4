module railyard/tools/kubernetes/crds

go 1.26.8

require github.com/k8snetworkplumbingwg/sriov-network-operator v1.6.0
