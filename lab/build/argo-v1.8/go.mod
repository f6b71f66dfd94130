// Wrapper module that builds the Argo Rollouts controller v1.8.5 from the Go
// module proxy: the oldest controller `make compat` runs danki against (step
// plugins arrived in v1.8.0; see lab/scripts/build.sh argo and docs/install.md,
// "Compatibility"). Like lab/build/argo, it copies argo-rollouts' replace block
// (v1.8.5's own: k8s.io/* at v0.29.3) and go.sum, and requires the release.
module github.com/danki-dev/danki/lab/build/argo-v1.8

go 1.23.4

require github.com/argoproj/argo-rollouts v1.8.5

replace (
	github.com/go-check/check => github.com/go-check/check v0.0.0-20180628173108-788fd7840127
	github.com/go-telegram-bot-api/telegram-bot-api/v5 => github.com/OvyFlash/telegram-bot-api/v5 v5.0.0-20240108230938-63e5c59035bf
	k8s.io/api v0.0.0 => k8s.io/api v0.29.3
	k8s.io/apiextensions-apiserver v0.0.0 => k8s.io/apiextensions-apiserver v0.29.3
	k8s.io/apimachinery v0.0.0 => k8s.io/apimachinery v0.29.3
	k8s.io/apiserver v0.0.0 => k8s.io/apiserver v0.29.3
	k8s.io/cli-runtime v0.0.0 => k8s.io/cli-runtime v0.29.3
	k8s.io/client-go v0.0.0 => k8s.io/client-go v0.29.3
	k8s.io/cloud-provider v0.0.0 => k8s.io/cloud-provider v0.29.3
	k8s.io/cluster-bootstrap v0.0.0 => k8s.io/cluster-bootstrap v0.29.3
	k8s.io/code-generator v0.0.0 => k8s.io/code-generator v0.29.3
	k8s.io/component-base v0.0.0 => k8s.io/component-base v0.29.3
	k8s.io/component-helpers v0.0.0 => k8s.io/component-helpers v0.29.3
	k8s.io/controller-manager v0.0.0 => k8s.io/controller-manager v0.29.3
	k8s.io/cri-api v0.0.0 => k8s.io/cri-api v0.29.3
	k8s.io/csi-translation-lib v0.0.0 => k8s.io/csi-translation-lib v0.29.3
	k8s.io/kube-aggregator v0.0.0 => k8s.io/kube-aggregator v0.29.3
	k8s.io/kube-controller-manager v0.0.0 => k8s.io/kube-controller-manager v0.29.3
	k8s.io/kube-proxy v0.0.0 => k8s.io/kube-proxy v0.29.3
	k8s.io/kube-scheduler v0.0.0 => k8s.io/kube-scheduler v0.29.3
	k8s.io/kubectl v0.0.0 => k8s.io/kubectl v0.29.3
	k8s.io/kubelet v0.0.0 => k8s.io/kubelet v0.29.3
	k8s.io/legacy-cloud-providers v0.0.0 => k8s.io/legacy-cloud-providers v0.29.3
	k8s.io/metrics v0.0.0 => k8s.io/metrics v0.29.3
	k8s.io/mount-utils v0.0.0 => k8s.io/mount-utils v0.29.3
	k8s.io/pod-security-admission v0.0.0 => k8s.io/pod-security-admission v0.29.3
	k8s.io/sample-apiserver v0.0.0 => k8s.io/sample-apiserver v0.29.3
)
