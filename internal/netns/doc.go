// Package netns creates, enters and removes network namespaces. It is the
// only place in the project that calls setns: Do runs a function on a locked
// OS thread inside a namespace and throws the thread away if it cannot switch
// back, so no goroutine ever runs in a namespace it did not ask for.
package netns
