package conn

// SetJoinHooks makes register run as each connection is about to be
// registered, and connected as each pending connect's first event is
// looked at (nil: nothing), until restore is called. Call both while no
// server runs: the hooks are plain variables.
func SetJoinHooks(register, connected func()) (restore func()) {
	oldRegister, oldConnected := testHookRegister, testHookConnected
	testHookRegister, testHookConnected = orNothing(register), orNothing(connected)
	return func() { testHookRegister, testHookConnected = oldRegister, oldConnected }
}

func orNothing(f func()) func() {
	if f == nil {
		return func() {}
	}
	return f
}

// Closing reports whether Shutdown or Close has begun.
func (s *Server) Closing() bool { return s.closing.Load() }
