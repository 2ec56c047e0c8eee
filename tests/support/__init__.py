"""Test support shared by the suites: fixtures' helpers, scenarios, fakes of ports, child processes the tests run."""
