package state

import "crypto/rand"

// RandomName returns prefix followed by n random lower-case letters or
// digits: a name for a cluster or container that must not collide with one
// made by a parallel run (the bench's own clusters, test clusters).
func RandomName(prefix string, n int) string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return prefix + string(b)
}
