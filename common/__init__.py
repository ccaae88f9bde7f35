"""Shared plumbing every part may import (the settings loader); it imports no part."""
