package rollouts

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// restConfigFromEnvironment loads the Kubernetes client configuration the way
// kubectl does: $KUBECONFIG or ~/.kube/config, else the in-cluster service
// account. Plugin processes inherit the controller's environment, not its
// --kubeconfig flag.
func restConfigFromEnvironment() (*rest.Config, error) {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
}
