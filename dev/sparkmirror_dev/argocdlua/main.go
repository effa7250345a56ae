// argocdlua runs an Argo CD health check (a Lua script) the way Argo CD's controller runs a custom one: in
// gopher-lua, Argo CD's Lua runtime, with only the libraries it opens for a script whose useOpenLibs is false
// (package, base, table, and os reduced to clock, date, difftime and time), the object as the global `obj`
// (JSON numbers become Lua numbers, objects and arrays tables), one second to finish, and the returned table
// read as {status, message}; a status Argo CD does not know becomes Unknown.
//
// Usage: argocdlua SCRIPT < objects, one JSON object a line; prints one JSON line {"status", "message"} or
// {"error"} for each. The sparkmirror tests use it on the health check shipped in gitops/.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
)

type result struct {
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

var known = map[string]bool{"Unknown": true, "Progressing": true, "Suspended": true, "Healthy": true,
	"Degraded": true, "Missing": true}

// toLua turns a value decoded from JSON into the Lua value a health script sees.
func toLua(L *lua.LState, v interface{}) lua.LValue {
	switch x := v.(type) {
	case bool:
		return lua.LBool(x)
	case float64:
		return lua.LNumber(x)
	case string:
		return lua.LString(x)
	case []interface{}:
		t := L.CreateTable(len(x), 0)
		for _, item := range x {
			t.Append(toLua(L, item))
		}
		return t
	case map[string]interface{}:
		t := L.CreateTable(0, len(x))
		for k, item := range x {
			t.RawSetString(k, toLua(L, item))
		}
		return t
	}
	return lua.LNil
}

// openLibs opens what Argo CD opens for a custom health check without useOpenLibs.
func openLibs(L *lua.LState) {
	for name, open := range map[string]lua.LGFunction{lua.LoadLibName: lua.OpenPackage,
		lua.BaseLibName: lua.OpenBase, lua.TabLibName: lua.OpenTable, lua.OsLibName: lua.OpenOs} {
		L.Push(L.NewFunction(open))
		L.Push(lua.LString(name))
		L.Call(1, 0)
	}
	os := L.GetGlobal(lua.OsLibName).(*lua.LTable)
	safe := L.NewTable()
	for _, f := range []string{"clock", "date", "difftime", "time"} {
		safe.RawSetString(f, os.RawGetString(f))
	}
	L.SetGlobal(lua.OsLibName, safe)
}

func run(script string, obj map[string]interface{}) result {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	openLibs(L)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return result{Error: err.Error()}
	}
	t, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return result{Error: fmt.Sprintf("expect table output from Lua script, not %s", L.Get(-1).Type())}
	}
	r := result{Status: lua.LVAsString(t.RawGetString("status")), Message: lua.LVAsString(t.RawGetString("message"))}
	if !known[r.Status] {
		return result{Status: "Unknown", Message: "Lua returned an invalid health status"}
	}
	return r
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: argocdlua SCRIPT < objects (JSON lines)")
		os.Exit(2)
	}
	script, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		var obj map[string]interface{}
		if err := json.Unmarshal(in.Bytes(), &obj); err != nil {
			_ = out.Encode(result{Error: err.Error()})
			continue
		}
		_ = out.Encode(run(string(script), obj))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
