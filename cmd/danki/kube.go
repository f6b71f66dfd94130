package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are the kubectl-style connection flags of every command that
// talks to a cluster: --kubeconfig, --context and -n/--namespace, bound with
// client-go's own flag definitions so they read and behave as kubectl's.
type kubeFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
}

// addFlags registers the flags on fs; namespaceUsage says what the
// namespace selects for this command.
func (k *kubeFlags) addFlags(fs *pflag.FlagSet, namespaceUsage string) {
	fs.StringVar(&k.kubeconfig, clientcmd.RecommendedConfigPathFlag, "",
		"kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.CurrentContext.Description = "the kubeconfig context to use (default: its current-context)"
	names.CurrentContext.BindStringFlag(fs, &k.overrides.CurrentContext)
	ns := names.ContextOverrideFlags.Namespace
	ns.Description = namespaceUsage + " (default: the kubeconfig context's namespace)"
	ns.BindStringFlag(fs, &k.overrides.Context.Namespace)
}

// clientConfig loads the kubeconfig the way kubectl does: the --kubeconfig
// file when given, else $KUBECONFIG, ~/.kube/config or the in-cluster
// service account, with --context and --namespace applied.
func (k *kubeFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := k.overrides
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &overrides)
}

// restConfig is the client configuration for the API server.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	rc, err := k.clientConfig().ClientConfig()
	return rc, k.explain(err)
}

// namespace is --namespace, else the context's namespace, else "default".
func (k *kubeFlags) namespace() (string, error) {
	ns, _, err := k.clientConfig().Namespace()
	return ns, k.explain(err)
}

// explain says which kubeconfig failed to load, where it was named (the
// --kubeconfig flag, $KUBECONFIG, the default file) and what to do:
// client-go's own words ("stat /x: no such file or directory", "no
// configuration has been provided, try setting KUBERNETES_MASTER") name
// neither the file's source nor danki's flags.
func (k *kubeFlags) explain(err error) error {
	if err == nil {
		return nil
	}
	var where string
	files := []string{k.kubeconfig}
	switch env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); {
	case k.kubeconfig != "":
		where = fmt.Sprintf("kubeconfig %s (--kubeconfig)", k.kubeconfig)
	case env != "":
		where = fmt.Sprintf("kubeconfig %s ($KUBECONFIG)", env)
		files = filepath.SplitList(env)
	default:
		where = fmt.Sprintf("kubeconfig %s (the default: no --kubeconfig, no $KUBECONFIG)", clientcmd.RecommendedHomeFile)
		files = []string{clientcmd.RecommendedHomeFile}
	}
	missing := true // client-go skips the missing files of $KUBECONFIG
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			missing = false
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such file: give --kubeconfig an existing file or set $KUBECONFIG (%w)", where, err)
	case clientcmd.IsEmptyConfig(err) && missing:
		return fmt.Errorf("%s: no such file, and danki is not running in a pod (no in-cluster service account): give --kubeconfig FILE or set $KUBECONFIG", where)
	case clientcmd.IsEmptyConfig(err):
		return fmt.Errorf("%s: no cluster configured in it, and danki is not running in a pod (no in-cluster service account): give --kubeconfig FILE or set $KUBECONFIG", where)
	case clientcmd.IsContextNotFound(err), k.overrides.CurrentContext != "" && strings.Contains(err.Error(), "context \""+k.overrides.CurrentContext+"\" does not exist"):
		return fmt.Errorf("%s: %w: give --context one of its contexts (kubectl config get-contexts) or leave it out for its current-context", where, err)
	}
	return fmt.Errorf("%s: %w (danki reads it as kubectl does: --kubeconfig, --context, $KUBECONFIG)", where, err)
}
