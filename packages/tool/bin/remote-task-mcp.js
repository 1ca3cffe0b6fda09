#!/usr/bin/env node
import "../dist/mcp-bin.js";
