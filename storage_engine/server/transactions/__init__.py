"""The transaction coordinator: transactional ids, their producer ids and epochs, and the transactions they run,
kept in ``__transaction_state``."""
