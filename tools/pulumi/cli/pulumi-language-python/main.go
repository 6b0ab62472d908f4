// Command pulumi-language-python is Railyard's Python language host for the Pulumi engine.
//
// Upstream's host lives in its own Go module, which the Go module proxy reachable from Railyard's
// machines refuses to serve, so the engine here gets this small host instead. It is built from the
// same pinned sdk/v3 module as the CLI and runs programs exactly as upstream's does: it resolves
// the project's virtualenv with sdk/v3's python toolchain package and starts the SDK's own
// pulumi-language-python-exec shim (shipped in the sdk/v3 module) with the arguments and
// environment the shim expects. It implements what `pulumi preview|up|destroy|refresh|about`
// call; code generation, packing and conversion are left unimplemented (Railyard has no use
// for them), which the engine reports as "not implemented" if someone asks.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The exec shim exits with this code after it has already shown the user an actionable message;
// the engine must then bail out without adding a second, less useful error.
const exitAfterUserMessage = 32

const execShimName = "pulumi-language-python-exec"

// listPluginsScript prints, as JSON, every installed distribution that ships a pulumi-plugin.json,
// which is how Pulumi packages (pulumi-kubernetes here) declare the resource plugin they need.
const listPluginsScript = `
import importlib.metadata as md, json, sys
out = []
for dist in md.distributions():
    for f in dist.files or ():
        if f.name == "pulumi-plugin.json":
            try:
                out.append({"name": dist.metadata["Name"], "version": dist.version,
                            "plugin": json.loads(f.read_text())})
            except Exception:
                pass
            break
json.dump(out, sys.stdout)
`

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	execShim      string
	engineAddress string
	tracing       string
}

func main() {
	tracing := flag.String("tracing", "", "Emit tracing to a Zipkin-compatible tracing endpoint")
	showVersion := flag.Bool("version", false, "Print the plugin version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version)
		return
	}

	self, err := os.Executable()
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not determine current executable: %w", err))
	}
	shim := filepath.Join(filepath.Dir(self), execShimName)
	if _, err := os.Stat(shim); err != nil {
		cmdutil.Exit(fmt.Errorf("missing executor %s next to the language host: %w", shim, err))
	}

	h := &host{execShim: shim, tracing: *tracing}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	cancelChannel := make(chan bool)
	go func() {
		<-ctx.Done()
		close(cancelChannel)
	}()
	if args := flag.Args(); len(args) > 0 {
		h.engineAddress = args[0]
		if err := rpcutil.Healthcheck(ctx, h.engineAddress, 5*time.Minute, cancel); err != nil {
			cmdutil.Exit(fmt.Errorf("could not start health check: %w", err))
		}
	}

	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancelChannel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, h)
			return nil
		},
	})
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not start language host RPC server: %w", err))
	}
	// The engine reads the port from the first line of stdout.
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		cmdutil.Exit(fmt.Errorf("language host RPC stopped serving: %w", err))
	}
}

func (h *host) Handshake(ctx context.Context,
	req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	h.engineAddress = req.EngineAddress
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

// options reads the runtime options of Pulumi.yaml that Railyard uses (virtualenv, toolchain).
func options(info *pulumirpc.ProgramInfo) (toolchain.PythonOptions, error) {
	opts := toolchain.PythonOptions{Toolchain: toolchain.Pip}
	if info == nil {
		return opts, nil
	}
	opts.Root, opts.ProgramDir = info.RootDirectory, info.ProgramDirectory
	m := info.Options.AsMap()
	if v, ok := m["virtualenv"]; ok {
		s, ok := v.(string)
		if !ok {
			return opts, errors.New("runtime option virtualenv must be a string")
		}
		opts.Virtualenv = s
	}
	if v, ok := m["toolchain"]; ok && v != "pip" {
		return opts, fmt.Errorf("runtime option toolchain %v is not supported by Railyard's language host (only pip)", v)
	}
	if _, ok := m["typechecker"]; ok {
		return opts, errors.New("runtime option typechecker is not supported by Railyard's language host")
	}
	return opts, nil
}

func (h *host) toolchainFor(info *pulumirpc.ProgramInfo) (toolchain.Toolchain, error) {
	opts, err := options(info)
	if err != nil {
		return nil, err
	}
	return toolchain.ResolveToolchain(opts)
}

var plainVersion = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

func (h *host) requiredPackages(ctx context.Context, info *pulumirpc.ProgramInfo) ([]*pulumirpc.PackageDependency, error) {
	tc, err := h.toolchainFor(info)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}
	cmd, err := tc.Command(ctx, "-c", listPluginsScript)
	if err != nil {
		return nil, err
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing Pulumi packages in the virtualenv: %w", err)
	}
	var dists []struct {
		Name    string                  `json:"name"`
		Version string                  `json:"version"`
		Plugin  plugin.PulumiPluginJSON `json:"plugin"`
	}
	if err := json.Unmarshal(out, &dists); err != nil {
		return nil, fmt.Errorf("reading pulumi-plugin.json files: %w", err)
	}
	var deps []*pulumirpc.PackageDependency
	for _, d := range dists {
		if !d.Plugin.Resource {
			continue
		}
		name, ver := d.Plugin.Name, d.Plugin.Version
		if name == "" {
			name = d.Name[len("pulumi-"):]
		}
		if ver == "" {
			if !plainVersion.MatchString(d.Version) {
				continue // a pre-release whose plugin version cannot be derived; upstream skips these too
			}
			ver = d.Version
		}
		if ver[0] != 'v' {
			ver = "v" + ver
		}
		dep := &pulumirpc.PackageDependency{Name: name, Version: ver, Kind: "resource", Server: d.Plugin.Server}
		if p := d.Plugin.Parameterization; p != nil {
			dep.Parameterization = &pulumirpc.PackageParameterization{Name: p.Name, Version: p.Version, Value: p.Value}
		}
		deps = append(deps, dep)
	}
	return deps, nil
}

func (h *host) GetRequiredPackages(ctx context.Context,
	req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	deps, err := h.requiredPackages(ctx, req.Info)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.GetRequiredPackagesResponse{Packages: deps}, nil
}

func (h *host) GetRequiredPlugins(ctx context.Context,
	req *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	deps, err := h.requiredPackages(ctx, req.Info)
	if err != nil {
		return nil, err
	}
	plugins := make([]*pulumirpc.PluginDependency, 0, len(deps))
	for _, d := range deps {
		plugins = append(plugins, &pulumirpc.PluginDependency{Name: d.Name, Version: d.Version, Kind: d.Kind, Server: d.Server})
	}
	return &pulumirpc.GetRequiredPluginsResponse{Plugins: plugins}, nil
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	tc, err := h.toolchainFor(req.Info)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}

	args := []string{h.execShim}
	add := func(k, v string) {
		if v != "" {
			args = append(args, "--"+k, v)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.engineAddress)
	add("project", req.GetProject())
	add("root_directory", req.GetInfo().GetRootDirectory())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", strconv.FormatBool(req.GetDryRun()))
	add("parallel", strconv.Itoa(int(req.GetParallel())))
	add("tracing", h.tracing)
	add("organization", req.GetOrganization())
	args = append(args, req.GetInfo().GetEntryPoint())
	args = append(args, req.GetArgs()...)

	config, err := json.Marshal(req.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("serializing configuration: %w", err)
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secretJSON, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, fmt.Errorf("serializing configuration secret keys: %w", err)
	}

	cmd, err := tc.Command(ctx, args...)
	if err != nil {
		return nil, err
	}
	// Interrupt first so the SDK can flush registrations; kill if it does not stop.
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, "PULUMI_CONFIG="+string(config), "PULUMI_CONFIG_SECRET_KEYS="+string(secretJSON))

	if err := cmd.Run(); err != nil {
		_ = os.Stdout.Sync()
		_ = os.Stderr.Sync()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.ExitStatus() == exitAfterUserMessage {
				return &pulumirpc.RunResponse{Bail: true}, nil
			}
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("program exited with non-zero exit code: %d", exitErr.ExitCode())}, nil
		}
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("could not run the language executor: %v", err)}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

func (h *host) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	tc, err := h.toolchainFor(req.GetInfo())
	if err != nil {
		return nil, err
	}
	info, err := tc.About(ctx)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.AboutResponse{
		Executable: info.PythonExecutable,
		Version:    info.PythonVersion.String(),
		Metadata: map[string]string{
			"toolchain":        "Pip",
			"toolchainVersion": info.ToolchainVersion.String(),
			"languageHost":     "railyard",
		},
	}, nil
}

func (h *host) GetProgramDependencies(ctx context.Context,
	req *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	tc, err := h.toolchainFor(req.GetInfo())
	if err != nil {
		return nil, err
	}
	pkgs, err := tc.ListPackages(ctx, req.TransitiveDependencies)
	if err != nil {
		return nil, fmt.Errorf("failed to get python dependencies: %w", err)
	}
	deps := make([]*pulumirpc.DependencyInfo, len(pkgs))
	for i, p := range pkgs {
		deps[i] = &pulumirpc.DependencyInfo{Name: p.Name, Version: p.Version}
	}
	return &pulumirpc.GetProgramDependenciesResponse{Dependencies: deps}, nil
}

// InstallDependencies is a no-op that says so: Railyard's Makefile owns the virtualenv, and the
// engine calls this on `pulumi install` only.
func (h *host) InstallDependencies(req *pulumirpc.InstallDependenciesRequest,
	server grpc.ServerStreamingServer[pulumirpc.InstallDependenciesResponse],
) error {
	return server.Send(&pulumirpc.InstallDependenciesResponse{
		Stdout: []byte("Railyard manages .venv itself: run `make venv`.\n"),
	})
}
