"""Shared plumbing every part may import (the settings loader, the fabric model); it imports
no part."""
