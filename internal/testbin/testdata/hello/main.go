// Command hello is testbin's test command: it prints hello.
package main

import "fmt"

func main() { fmt.Println("hello") }
