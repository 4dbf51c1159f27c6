"""The rules of runstate: state machines, compare-and-swap writes, events and expiry.

Nothing here knows GraphQL or HTTP; transports call these functions and turn the
typed errors of ``runstate.services.domain.errors`` into their own answers.
"""
