package credit_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Or keeps every need of either side: each field set alone on one side is
// set in the result, whichever side it is on, so a field added to Needs
// and forgotten in Or fails here.
func TestNeedsOrKeepsEveryField(t *testing.T) {
	n := reflect.TypeFor[credit.Needs]().NumField()
	for i := range n {
		var one credit.Needs
		reflect.ValueOf(&one).Elem().Field(i).SetBool(true)
		name := reflect.TypeFor[credit.Needs]().Field(i).Name
		assert.Equal(t, one, one.Or(credit.Needs{}), name)
		assert.Equal(t, one, credit.Needs{}.Or(one), name)
	}
	assert.Equal(t, credit.Needs{}, credit.Needs{}.Or(credit.Needs{}))
}
