// Package wellknown declares the names users see on their objects and on
// the wire: the danki.dev/* annotations, labels and pod conditions danki
// writes or reads, and the warm-up marker header. Each comment says who
// writes the name and who reads it; docs/names.md lists them all (a test
// keeps the two in step).
//
// It is the ground floor: it imports nothing of danki's, so every package
// (pkg/shift, pkg/gate, pkg/warmup, pkg/capacity, pkg/mirror, rollouts, the
// CLI, the lab and the tests) can name these without pulling in another.
//
// The names are untyped constants: they convert to the type a field needs
// (corev1.PodConditionType for the conditions) without a cast.
package wellknown
