package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/docs/mdblock"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

// kubectlWrites are the kubectl commands that change objects.
var kubectlWrites = []string{"apply", "create", "label", "annotate", "patch", "replace", "delete", "scale", "set"}

// TestDocCommands runs every shell command and manifest of README.md,
// docs/*.md and the chart's README on this repository's cluster, as a
// reader copies them, but those the docs mark as not run here.
//
// A block is marked on the line before its fence, with the reason
// (<!-- not run: reason -->); the unit test test/docs TestDocCommands
// fails on a block that is neither output, run here nor marked. The
// placeholders are filled in (<registry>: the cluster's registry path that
// holds the chart and the image; <x.y.z>: the release installed). A command runs as written, with a kubeconfig whose
// namespace is the test's, except what would change the cluster's
// installation, which runs as a dry run against it: helm install and
// upgrade (--dry-run=server: rendered, checked against the release and
// the server), helm uninstall (--dry-run), and kubectl's writes outside
// the test's namespace (--dry-run=server; the create of a namespace that
// exists, the install's own, becomes a get of it). The cluster's loopback
// registry serves plain http (helm's --plain-http). A manifest is applied
// to the server (server-side apply, strict fields, dry run): schema, CEL,
// the admission policies and the driver's webhooks.
func TestDocCommands(t *testing.T) {
	c := loadCluster(t, needsOurCluster("runs the docs' helm commands against this repository's release of the chart and its registry"))
	// The cluster's own kubectl (hack/cluster/build.sh), of the server's
	// version: a reader's may be any, and a CI machine may have none.
	kubectl := filepath.Join(c.repoRoot, "_output", "bin", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("the docs' commands need the cluster's kubectl (hack/cluster/build.sh builds it): %v", err)
	}
	blocks, err := mdblock.Load(c.repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	ns := c.namespace(t)
	run := docRunner{
		c: c, ns: ns, kubectl: kubectl,
		helm: filepath.Join(c.repoRoot, "_output", "bin", "helm"),
		env:  c.docEnv(t, ns),
		values: map[string]string{
			"<registry>": c.Env["DRIVER_REPOSITORY"],
			"<x.y.z>":    c.Env["DRIVER_VERSION"],
		},
	}
	for p := range mdblock.Substitutions {
		if run.values[p] == "" {
			t.Fatalf("the cluster's env file gives no value for the docs' placeholder %s (%s)", p, mdblock.Substitutions[p])
		}
	}
	resources, err := manifest.NewResources(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var ran, marked int
	for _, b := range blocks {
		if b.NotRun != "" && b.Lang != mdblock.Text {
			marked++
			continue
		}
		if !b.Run() {
			continue
		}
		ran++
		t.Run(strings.NewReplacer("/", "_", ".md:", ":").Replace(b.String()), func(t *testing.T) {
			begin := time.Now()
			switch b.Lang {
			case mdblock.Shell:
				run.shell(t, b)
			case mdblock.YAML:
				run.manifest(t, resources, b)
			}
			t.Logf("%s took %v", b, time.Since(begin).Round(time.Millisecond))
		})
	}
	t.Logf("%d blocks run, %d marked not run, in %v", ran, marked, time.Since(start).Round(100*time.Millisecond))
	if ran == 0 {
		t.Error("no block of the docs was run")
	}
	c.logPluginMemory(t)
}

// docRunner runs the docs' blocks.
type docRunner struct {
	c             *env
	ns            string
	kubectl, helm string
	env           []string
	values        map[string]string
}

// docEnv is the environment of the docs' commands: the admin's kubeconfig
// with the test's namespace as its default, the cluster's registry
// credentials, and helm's own directories apart from the host's.
func (c *env) docEnv(t *testing.T, ns string) []string {
	t.Helper()
	dir := t.TempDir()
	cfg, err := clientcmd.LoadFromFile(c.Env["KUBECONFIG"])
	if err != nil {
		t.Fatal(err)
	}
	kc := cfg.Contexts[cfg.CurrentContext]
	if kc == nil {
		t.Fatalf("%s has no current context", c.Env["KUBECONFIG"])
	}
	kc.Namespace = ns
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "KUBECONFIG" || k == "DOCKER_CONFIG" || strings.HasPrefix(k, "HELM_")
	})
	return append(env, "KUBECONFIG="+kubeconfig, "DOCKER_CONFIG="+c.Env["DOCKER_CONFIG"],
		"HELM_CACHE_HOME="+filepath.Join(dir, "helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "helm-config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "helm-data"))
}

// shell runs a shell block's commands one after the other, each as the
// command says or as its dry run (argv).
func (r docRunner) shell(t *testing.T, b mdblock.Block) {
	t.Helper()
	cmds, err := mdblock.Commands(b.Substitute(r.values))
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	for _, cmd := range cmds {
		argv, why := r.argv(t, cmd.Args)
		if why != "" {
			t.Logf("%s: %s", cmd.Text, why)
		}
		ctx, cancel := context.WithTimeout(context.Background(), cluster.Scaled(time.Minute))
		x := exec.CommandContext(ctx, argv[0], argv[1:]...)
		x.Dir, x.Env = r.c.repoRoot, r.env
		begin := time.Now()
		out, err := x.CombinedOutput()
		cancel()
		log := string(out)
		if len(log) > 2000 {
			log = log[:1000] + "\n…\n" + log[len(log)-1000:]
		}
		t.Logf("$ %s  (%v)\n%s", strings.Join(argv[1:], " "), time.Since(begin).Round(time.Millisecond), log)
		if err != nil {
			t.Errorf("%s: line %d, %q: %v", b, cmd.Line, cmd.Text, err)
		}
	}
}

// argv is what runs for a command of the docs: the command itself, or its
// dry run, and why.
func (r docRunner) argv(t *testing.T, args []string) ([]string, string) {
	t.Helper()
	verb := ""
	if len(args) > 1 {
		verb = args[1]
	}
	switch args[0] {
	case "helm":
		argv := append([]string{r.helm}, args[1:]...)
		var why []string
		switch verb {
		case "install", "upgrade":
			argv = append(argv, "--dry-run=server")
			why = append(why, "a dry run: the cluster's release stays as it is")
		case "uninstall":
			argv = append(argv, "--dry-run")
			why = append(why, "a dry run: the cluster's release stays")
		}
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "oci://"+r.c.Registry()+"/") }) {
			argv = append(argv, "--plain-http")
			why = append(why, "the cluster's loopback registry serves plain http")
		}
		return argv, strings.Join(why, "; ")
	case "kubectl":
		argv := append([]string{r.kubectl}, args[1:]...)
		if !slices.Contains(kubectlWrites, verb) {
			return argv, ""
		}
		namespaced := len(args) > 2 && slices.Contains([]string{"namespace", "namespaces", "ns"}, args[2])
		other := ""
		for i, a := range args {
			if (a == "-n" || a == "--namespace") && i+1 < len(args) && args[i+1] != r.ns {
				other = args[i+1]
			}
			if v, ok := strings.CutPrefix(a, "--namespace="); ok && v != r.ns {
				other = v
			}
		}
		if !namespaced && other == "" {
			return argv, ""
		}
		if verb == "create" && namespaced && len(args) > 3 {
			_, err := r.c.client.CoreV1().Namespaces().Get(context.Background(), args[3], metav1.GetOptions{})
			if err == nil {
				return []string{r.kubectl, "get", "namespace", args[3]}, "the namespace exists (the cluster's install made it): a get of it"
			}
			if !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		return append(argv, "--dry-run=server"), "a dry run: it writes outside the test's namespace"
	}
	t.Fatalf("the docs' blocks that are run call %v only, not %s", mdblock.Programs, args[0])
	return nil, ""
}

// manifest applies a manifest block's objects with a server-side dry run,
// namespaced ones in the test's namespace.
func (r docRunner) manifest(t *testing.T, resources *manifest.Resources, b mdblock.Block) {
	t.Helper()
	objs, err := manifest.Decode(b.Substitute(r.values))
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	for _, obj := range objs {
		res, err := resources.For(obj, r.ns)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if res.Namespaced {
			obj.SetNamespace(r.ns)
		}
		data, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		_, err = res.Client.Patch(context.Background(), obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
			FieldManager: "doc-commands", Force: ptr.To(true), DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict,
		})
		if err != nil {
			t.Errorf("%s: %s %s: %v", b, obj.GetKind(), obj.GetName(), err)
			continue
		}
		t.Logf("%s: %s %s: applied (server dry run)", b, obj.GetKind(), obj.GetName())
	}
}

// logPluginMemory logs the kubelet plugin's resident memory, a figure for
// docs/sizing.md (not a bound: it depends on what the node runs).
func (c *env) logPluginMemory(t *testing.T) {
	t.Helper()
	lines, url, err := c.scrapePlugin(t)
	if err != nil {
		t.Logf("the plugin's memory: %v", err)
		return
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "process_resident_memory_bytes ") || strings.HasPrefix(l, "go_memstats_heap_inuse_bytes ") || strings.HasPrefix(l, "dra_swap_prepared_claims") {
			t.Logf("the plugin (%s): %s", url, l)
		}
	}
}
