// sriov-render prints the NetworkAttachmentDefinitions the SR-IOV Network Operator renders for
// SriovNetwork and SriovIBNetwork objects: its own RenderNetAttDef, run where its templates are
// (the module's bindata, given as the first argument). Railyard's tests compare
// railyard/model/kubernetes/sriov.py's rendering with it.
//
// stdin: a JSON list of objects; stdout: a JSON list of rendered objects, in the same order.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	// Its module is pinned here for artifacts/networks-crd.yaml, at the version the operator requires.
	_ "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	sriovv1 "github.com/k8snetworkplumbingwg/sriov-network-operator/api/v1"
	uns "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

type renderer interface {
	RenderNetAttDef() (*uns.Unstructured, error)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sriov-render MODULE_DIR < objects.json")
		os.Exit(2)
	}
	sriovv1.ManifestsPath = filepath.Join(os.Args[1], "bindata", "manifests", "cni-config")
	var raw []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&raw); err != nil {
		fail(err)
	}
	out := []map[string]interface{}{}
	for _, item := range raw {
		var head struct{ Kind string }
		if err := json.Unmarshal(item, &head); err != nil {
			fail(err)
		}
		var obj renderer
		switch head.Kind {
		case "SriovNetwork":
			obj = &sriovv1.SriovNetwork{}
		case "SriovIBNetwork":
			obj = &sriovv1.SriovIBNetwork{}
		default:
			fail(fmt.Errorf("cannot render a %q", head.Kind))
		}
		if err := json.Unmarshal(item, obj); err != nil {
			fail(err)
		}
		rendered, err := obj.RenderNetAttDef()
		if err != nil {
			fail(err)
		}
		out = append(out, rendered.Object)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sriov-render:", err)
	os.Exit(1)
}
