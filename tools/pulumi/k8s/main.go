// Command pulumi-resource-kubernetes serves the Kubernetes provider plugin at the version of the
// pinned pulumi-kubernetes Python package.
//
// Upstream's main package embeds schema-embed.json and terraform-mapping-embed.json, files that its
// build generates and git ignores, so they are not in the module zip and upstream's main cannot be
// built from the module proxy. This entry point embeds the committed schema.json and
// terraform-mapping.json of the same module instead; tools/pulumi/build.sh copies them here and sets
// the schema's version the way upstream's generator does.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema.json
var pulumiSchema []byte

//go:embed terraform-mapping.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
