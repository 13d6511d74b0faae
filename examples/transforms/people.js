// people.js: a mirror job. The "people" collection is copied into the
// replica's "people" collection without personal fields. Every other field
// keeps its BSON type (dates, ObjectIds, int64, Decimal128...), _id is kept.
module.exports = {
  collection: "people",
  mirror: "people",

  transform(doc) {
    delete doc.email;
    delete doc.phone;
    delete doc.birthDate;
    if (doc.address) {
      delete doc.address.street;
      delete doc.address.houseNumber;
    }
    return doc;
  },

  samples: [
    {
      _id: { $oid: "65f1c0a2b3c4d5e6f7a8b9d0" },
      name: "Grace",
      email: "grace@example.com",
      phone: "+1 555 0100",
      birthDate: { $date: "1906-12-09T00:00:00Z" },
      address: { street: "Main St", houseNumber: 7, city: "Arlington" },
      visits: { $numberLong: "12" },
      balance: { $numberDecimal: "10.50" },
      joined: { $date: "2024-01-02T03:04:05Z" },
    },
  ],
};
