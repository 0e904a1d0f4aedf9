package main

import "os"

func readInTest() string { return os.Getenv("X_TEST_ONLY") }
