package memstore

// Keys returns the number of keys holding state in st, expired or not.
func Keys(st *Store) int { return st.keys() }
