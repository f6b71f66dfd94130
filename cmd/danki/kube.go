package main

import "k8s.io/client-go/tools/clientcmd"

// kubeClientConfig loads a kubeconfig the way kubectl does: the --kubeconfig
// file when given, else $KUBECONFIG, ~/.kube/config or the in-cluster service
// account. A non-empty namespace overrides the context's.
func kubeClientConfig(kubeconfig, namespace string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	overrides := &clientcmd.ConfigOverrides{}
	overrides.Context.Namespace = namespace
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}
