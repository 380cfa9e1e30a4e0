package mount

// WithBeforeMount returns l with a hook run between the target's check and
// the mount.
func WithBeforeMount(l Linux, hook func()) Linux {
	l.beforeMount = hook
	return l
}
