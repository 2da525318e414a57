//go:build unix

package main

import "syscall"

// restrictUmask makes every file and directory the process creates
// readable only by the user running it (umask 077): the store's segments,
// consumer offsets and metadata hold application data. It applies on top of
// the modes the packages ask for.
func restrictUmask() { syscall.Umask(0o077) }
