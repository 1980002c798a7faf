//go:build !unix

package main

import "syscall"

// childAttr returns no special attributes: member processes share this
// one's console, and this process stops them on its way out.
func childAttr() *syscall.SysProcAttr { return nil }
