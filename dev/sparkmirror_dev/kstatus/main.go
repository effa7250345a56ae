// kstatus reads Kubernetes objects as JSON, one per line on stdin, and prints for each the status Flux and
// kpt compute for it with sigs.k8s.io/cli-utils' kstatus (InProgress, Current, Failed, Terminating, ...), as
// one JSON line {"status": ..., "message": ...}. The sparkmirror tests use it to check what GitOps tools make
// of the operator's conditions, with the library itself rather than a re-statement of its rules.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type result struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		var r result
		u := &unstructured.Unstructured{}
		// UnmarshalJSON keeps integers as int64, which kstatus' generation check requires
		if err := u.UnmarshalJSON(in.Bytes()); err != nil {
			r.Error = err.Error()
		} else if res, err := status.Compute(u); err != nil {
			r.Error = err.Error()
		} else {
			r.Status, r.Message = res.Status.String(), res.Message
		}
		if err := out.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
