"""Providers: everything nspec knows about one kind of API, behind one interface, found through a registry.

A provider holds what is specific to its API, in one module (`runners/providers/<name>.py` for the built-ins): the
rules of its model entries, its request lines and shard limits, its tokenizer, how to read its result lines, its
batch and live I/O, its rate-limit headers, and the mapping of its SDK's exceptions into nspec's error tree
(`nspec.errors`). What is policy — retries, backoff, pacing, the ledger, crash safety — lives in the runners, once.

- `contract`: the `Provider` interface, and what the compiler asks of it (how it caches, how it reasons, the request
  line as sent);
- `io`: what its batch and live clients take and give (`Credentials`, `Outcome`, `BatchView`, ...) and their
  interfaces;
- `registry`: the `nspec.providers` entry-point group, each entry point named after the `provider/` prefix of model
  ids and loading an object with the `Provider` interface;
- `credentials`: where a model entry's requests go, and the key they carry.

The built-ins register the same way as a plugin (pyproject.toml), so a third party adds a provider by publishing a
package with such an entry point; docs/providers.md has the recipe.
"""
