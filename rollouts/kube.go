package rollouts

import (
	"fmt"
	"sync"

	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// restConfigFromEnvironment loads the Kubernetes client configuration the way
// kubectl does: $KUBECONFIG or ~/.kube/config, else the in-cluster service
// account. Plugin processes inherit the controller's environment, not its
// --kubeconfig flag.
func restConfigFromEnvironment() (*rest.Config, error) { return RestConfig() }

// RestConfig is the client configuration the plugins use: $KUBECONFIG or
// ~/.kube/config, else the in-cluster service account.
func RestConfig() (*rest.Config, error) {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
}

// lazyKube builds a Kubernetes client from the environment on first use and
// remembers the outcome: plugins without pod lookups never need one.
type lazyKube struct {
	once sync.Once
	kube kubernetes.Interface
	err  error
}

func (l *lazyKube) get() (kubernetes.Interface, error) {
	l.once.Do(func() {
		cfg, err := restConfigFromEnvironment()
		if err == nil {
			l.kube, err = kubernetes.NewForConfig(cfg)
		}
		if err != nil {
			l.err = fmt.Errorf("no Kubernetes client to find the pods (%w): give urls, or run the plugin with a kubeconfig or in-cluster service account", err)
		}
	})
	return l.kube, l.err
}

// lazyArgo builds an Argo Rollouts client from the environment on first use
// and remembers the outcome, like lazyKube.
type lazyArgo struct {
	once sync.Once
	argo argoclient.Interface
	err  error
}

func (l *lazyArgo) get() (argoclient.Interface, error) {
	l.once.Do(func() {
		cfg, err := restConfigFromEnvironment()
		if err == nil {
			l.argo, err = argoclient.NewForConfig(cfg)
		}
		if err != nil {
			l.err = fmt.Errorf("no Argo Rollouts client (%w)", err)
		}
	})
	return l.argo, l.err
}
