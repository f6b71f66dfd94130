package main

import (
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
func (k *kubeFlags) restConfig() (*rest.Config, error) { return k.clientConfig().ClientConfig() }

// namespace is --namespace, else the context's namespace, else "default".
func (k *kubeFlags) namespace() (string, error) {
	ns, _, err := k.clientConfig().Namespace()
	return ns, err
}
