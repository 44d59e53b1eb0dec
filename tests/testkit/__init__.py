"""What the tests share: tiny random models, the test Hub, card folders (imported as testkit.*)."""
