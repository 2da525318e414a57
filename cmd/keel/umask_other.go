//go:build !unix

package main

// restrictUmask has no equivalent outside Unix; directory ACLs apply.
func restrictUmask() {}
