// Command escconfig: what the pinned Pulumi CLI hands a program for a stack whose file imports ESC
// environments, evaluated on this machine instead of by Pulumi Cloud (tools/engine/build.sh builds
// it as bin/pulumi-escconfig; tests/test_esc_environment.py judges settings/esc_environment.py by it).
//
// It reads one JSON request on stdin: the project file, the stack file, the stack's name and each
// environment's definition (YAML) by name. It evaluates the stack's environment with the evaluator
// this Pulumi release carries (sdk/go/common/esc/eval), as Pulumi Cloud opens it for `pulumi up`
// (cmd/pulumi/config/io.go `openUnmanagedStackEnv`: the stack file's `environment:` made one
// definition, workspace.Environment.Definition), merges its `pulumiConfig` into the stack's config
// with the CLI's own merge and checks, as `pulumi up` runs them (pkg/workspace/config.go
// ValidateStackConfigAndApplyProjectConfig, `mergeConfig`), and prints:
//   - "opened": each named environment alone, as `pulumi env open NAME --format detailed` prints it
//     (cmd/esc/cli/env_open.go renderValue: the JSON of esc.NewValue(Properties));
//   - "config": every key the program gets, its value as the engine passes it (objects as JSON),
//     and whether it is a secret.
//
// A failure is printed as {"error": "..."} with exit status 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	pkgworkspace "github.com/pulumi/pulumi/pkg/v3/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/esc"
	"github.com/pulumi/pulumi/sdk/v3/go/common/esc/eval"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

type request struct {
	Project      string            `json:"project"`
	StackFile    string            `json:"stackFile"`
	Stack        string            `json:"stack"`
	Environments map[string]string `json:"environments"`
}

type setting struct {
	Value  string `json:"value"`
	Object bool   `json:"object"`
	Secret bool   `json:"secret"`
}

type response struct {
	Opened map[string]esc.Value `json:"opened"`
	Config map[string]setting   `json:"config"`
}

// definitions plays Pulumi Cloud's environment store: a name resolves to the definition given.
type definitions map[string]string

func (d definitions) LoadEnvironment(_ context.Context, name string) ([]byte, string, eval.Decrypter, error) {
	text, ok := d[name]
	if !ok {
		return nil, "", nil, fmt.Errorf("environment %q not found", name)
	}
	return []byte(text), name, noCiphertext{}, nil
}

// AuthorizeImport: every environment of a request may import any other (in Pulumi Cloud, what the
// caller may read; here, what the request holds).
func (d definitions) AuthorizeImport(_ context.Context, _, imported string, _ bool) error {
	if _, ok := d[imported]; !ok {
		return fmt.Errorf("environment %q not found", imported)
	}
	return nil
}

// noCiphertext: the requests hold plaintext `fn::secret` values only, never ciphertext.
type noCiphertext struct{}

func (noCiphertext) Decrypt(context.Context, []byte) ([]byte, error) {
	return nil, errors.New("ciphertext cannot be decrypted here")
}

// noProviders: `fn::open` needs a cloud; the requests do not use it.
type noProviders struct{}

func (noProviders) LoadProvider(_ context.Context, name string) (esc.Provider, error) {
	return nil, fmt.Errorf("provider %q is not available offline", name)
}

func (noProviders) LoadRotator(_ context.Context, name string) (esc.Rotator, error) {
	return nil, fmt.Errorf("rotator %q is not available offline", name)
}

func open(ctx context.Context, name string, definition []byte, store definitions) (*esc.Environment, error) {
	decl, diags, err := eval.LoadYAMLBytes(name, definition)
	if err != nil {
		return nil, err
	}
	if diags.HasErrors() {
		return nil, diags
	}
	execContext, err := esc.NewExecContext(map[string]esc.Value{})
	if err != nil {
		return nil, err
	}
	env, diags := eval.EvalEnvironment(
		ctx, name, decl, noCiphertext{}, noProviders{}, store, execContext, eval.EvalOptions{})
	if diags.HasErrors() {
		return nil, diags
	}
	return env, nil
}

func run(ctx context.Context, req request) (*response, error) {
	project, err := workspace.LoadProject(req.Project)
	if err != nil {
		return nil, err
	}
	sink := diag.DefaultSink(os.Stderr, os.Stderr, diag.FormatOptions{Color: colors.Never})
	stack, err := workspace.LoadProjectStack(sink, project, req.StackFile)
	if err != nil {
		return nil, err
	}
	store := definitions(req.Environments)
	out := &response{Opened: map[string]esc.Value{}, Config: map[string]setting{}}
	for name, text := range store {
		env, err := open(ctx, name, []byte(text), store)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", name, err)
		}
		out.Opened[name] = esc.NewValue(env.Properties)
	}
	var pulumiConfig esc.Value
	if definition := stack.Environment.Definition(); definition != nil {
		env, err := open(ctx, "yaml", definition, store)
		if err != nil {
			return nil, fmt.Errorf("opening the stack's environment: %w", err)
		}
		pulumiConfig = env.Properties["pulumiConfig"]
	}
	crypter := config.Base64Crypter
	if err := pkgworkspace.ValidateStackConfigAndApplyProjectConfig(
		ctx, req.Stack, project, pulumiConfig, stack.Config, crypter, crypter); err != nil {
		return nil, err
	}
	for key, value := range stack.Config {
		plain, err := value.Value(crypter)
		if err != nil {
			return nil, err
		}
		out.Config[key.String()] = setting{Value: plain, Object: value.Object(), Secret: value.Secure()}
	}
	return out, nil
}

func main() {
	var req request
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		_ = encoder.Encode(map[string]string{"error": err.Error()})
		os.Exit(1)
	}
	out, err := run(context.Background(), req)
	if err != nil {
		_ = encoder.Encode(map[string]string{"error": err.Error()})
		os.Exit(1)
	}
	_ = encoder.Encode(out)
}
